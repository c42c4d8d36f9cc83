// plugins/stage3/rank_agreement.hpp: that every rank walks stage 3's blocks alike. Ranks that gather or
// reduce different units would start collectives of different sizes, which Gloo answers by aborting the
// process; experimental.stage3_rank_agreement chooses when they compare:
//   each_collective   before every gather and reduction, a blocking all-gather of (kind, unit): the job
//                     stops at the first collective where ranks part, naming the ranks and the units; the
//                     host's time blocked there is the span "stage3/rank_agreement"
//   each_micro_batch  only at the end of backward (compare_block_order, which runs in both modes): no wait
//                     before collectives; a divergence whose collectives differ in size may fail in the
//                     communication layer first
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "zhost/cpp/plugin.hpp"

namespace zhost::stage3 {

class RankAgreement {
 public:
  enum class Collective : int64_t { kGather = 1, kReduce = 2 };
  using UnitName = std::function<std::string(int unit)>;  // "unit 3 ('h.2.attn.w_qkv' and 5 more)"

  RankAgreement() = default;
  // `device`: where the exchanged integers live (NCCL moves device tensors only).
  RankAgreement(const sdk::Host& host, at::Device device, bool each_collective, int units, UnitName unit_name);

  // Before a collective of `kind` on `unit`, in step `step`; throws when another rank starts another one.
  void before(Collective kind, int unit, int64_t step) const;
  // At the end of a micro-batch's backward: throws when another rank ran its blocks in another order (the
  // hash of this rank's block events, and their count, for the message).
  void compare_block_order(uint64_t hash, size_t events, int64_t step, int32_t micro_step) const;

 private:
  // Every rank's `mine` (the same count on each), rank after rank.
  std::vector<int64_t> all_gather_ints(const std::vector<int64_t>& mine) const;

  sdk::Host host_{nullptr, nullptr};
  at::Device device_{at::kCPU};
  bool each_collective_ = true;
  int rank_ = 0, world_size_ = 1, units_ = 0;
  UnitName unit_name_;
};

}  // namespace zhost::stage3
