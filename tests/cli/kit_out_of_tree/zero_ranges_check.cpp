// tests/cli/kit_out_of_tree/zero_ranges_check.cpp: the installed ZeRO library (zhost::zero) as a third party's
// own stage would use it: a flat layout of three parameters over two ranks and its reduction ranges
// (Note [Flat-range buckets]) against the counts worked out by hand; exits 1 on a mismatch.
//
//   parameters 5, 3, 4 elements: flat [0, 12), partitions of S = 6: rank 0 [0, 6), rank 1 [6, 12)
//   buckets of 8 elements: range 0 = p0 + p1 (flat [0, 8): 6 to rank 0, 2 to rank 1), range 1 = p2 ([8, 12))
#include <cstdio>
#include <vector>

#include "zhost/zero/flat_layout.hpp"
#include "zhost/zero/gradient_reducer.hpp"

int main() {
  const zhost::zero::FlatLayout layout({5, 3, 4}, 2);
  const std::vector<zhost::zero::ReductionRange> ranges = zhost::zero::flat_ranges(layout, 1, 8);
  const bool ok = layout.partition_size() == 6 && ranges.size() == 2 && ranges[0].numel == 8 &&
                  ranges[0].counts == std::vector<int64_t>{6, 2} && ranges[0].params == std::vector<uint32_t>{0, 1} &&
                  ranges[0].offsets == std::vector<int64_t>{0, 5} && ranges[0].target_offset == 0 &&
                  ranges[1].numel == 4 && ranges[1].counts == std::vector<int64_t>{0, 4} &&
                  ranges[1].target_offset == 2 && ranges[1].flat_offset == 8;
  std::printf("%s: the installed ZeRO library's flat ranges\n", ok ? "PASS" : "FAIL");
  return ok ? 0 : 1;
}
