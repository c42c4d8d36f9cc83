// bench/zeropp_quant/main.cpp: GB/s of the ZeRO++ quantization kernels (quantize, dequantize, dequantize-add;
// int8 and int4; fp32, bf16 and fp16) on each ISA path this CPU has, one thread, against a one-thread memcpy
// of the same input measured in the same run. Bytes counted: what the kernel must read plus what it writes
// (memcpy: the bytes read plus the bytes written). Each figure is the median of --reps timed calls after
// one untimed call; memcpy is measured before and after the kernels and its faster median is the reference.
// usage: bench_zeropp_quant [--elements N] [--reps R] [--block B]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "zhost/kit/zeropp_quant.hpp"

namespace {

using zhost::zeropp::Bits;
using zhost::zeropp::BlockFormat;
using zhost::zeropp::Dtype;
using zhost::zeropp::Isa;

double median_seconds(int reps, const std::function<void()>& call) {
  call();  // untimed: page faults, caches
  std::vector<double> times;
  for (int r = 0; r < reps; ++r) {
    const auto start = std::chrono::steady_clock::now();
    call();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

int64_t element_bytes(Dtype type) { return type == Dtype::kF32 ? 4 : 2; }
const char* dtype_name(Dtype type) { return type == Dtype::kF32 ? "fp32" : (type == Dtype::kBf16 ? "bf16" : "fp16"); }

}  // namespace

int main(int argc, char** argv) {
  int64_t n = int64_t{1} << 25;  // 32M elements: 128 MiB of fp32, 4x a 32 MiB L3
  int reps = 5;
  int64_t block = zhost::zeropp::kDefaultBlockSize;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--elements") n = std::atoll(argv[i + 1]);
    if (flag == "--reps") reps = std::atoi(argv[i + 1]);
    if (flag == "--block") block = std::atoll(argv[i + 1]);
  }

  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = static_cast<float>((i * 7919) % 2001 - 1000) * 1e-3f;
  std::vector<uint8_t> input(static_cast<size_t>(4 * n)), output(static_cast<size_t>(4 * n));
  std::vector<uint8_t> data(static_cast<size_t>(n));
  std::vector<float> scales(static_cast<size_t>(n / block + 1)), sum(static_cast<size_t>(n));

  auto memcpy_gbs = [&] {
    const double s =
        median_seconds(reps, [&] { std::memcpy(output.data(), input.data(), static_cast<size_t>(4 * n)); });
    return 2.0 * 4 * static_cast<double>(n) / s / 1e9;
  };
  const double memcpy_before = memcpy_gbs();

  struct Row {
    std::string what;
    double gbs[3] = {0, 0, 0};  // scalar, avx2, avx512
  };
  std::vector<Row> rows;
  const Isa isas[] = {Isa::kScalar, Isa::kAvx2, Isa::kAvx512};
  for (const Bits bits : {Bits::kInt8, Bits::kInt4}) {
    const BlockFormat format{bits, block};
    const auto q_bytes =
        static_cast<double>(zhost::zeropp::data_bytes(n, format) + 4 * zhost::zeropp::block_count(n, format));
    for (const Dtype type : {Dtype::kF32, Dtype::kBf16, Dtype::kF16}) {
      // The input in this type, from fp32 through the kernels' own fp32 path (dequantize of nothing is not
      // needed: quantize + dequantize gives representable values of the type).
      zhost::zeropp::quantize(values.data(), Dtype::kF32, n, format, data.data(), scales.data());
      zhost::zeropp::dequantize(data.data(), scales.data(), n, format, input.data(), type);
      const auto x_bytes = static_cast<double>(n * element_bytes(type));
      const std::string suffix = std::string(" ") + dtype_name(type) + " int" + std::to_string(static_cast<int>(bits));
      Row quantize_row{"quantize" + suffix}, dequantize_row{"dequantize" + suffix};
      for (int k = 0; k < 3; ++k) {
        if (!zhost::cpu_optim::isa_supported(isas[k])) continue;
        const zhost::zeropp::QuantOptions options{isas[k]};
        quantize_row.gbs[k] =
            (x_bytes + q_bytes) /
            median_seconds(
                reps,
                [&] { zhost::zeropp::quantize(input.data(), type, n, format, data.data(), scales.data(), options); }) /
            1e9;
        dequantize_row.gbs[k] = (x_bytes + q_bytes) /
                                median_seconds(reps,
                                               [&] {
                                                 zhost::zeropp::dequantize(data.data(), scales.data(), n, format,
                                                                           output.data(), type, options);
                                               }) /
                                1e9;
      }
      rows.push_back(quantize_row);
      rows.push_back(dequantize_row);
    }
    Row add_row{std::string("dequantize_add (fp32 sum) int") + std::to_string(static_cast<int>(bits))};
    for (int k = 0; k < 3; ++k) {
      if (!zhost::cpu_optim::isa_supported(isas[k])) continue;
      const zhost::zeropp::QuantOptions options{isas[k]};
      add_row.gbs[k] =
          (q_bytes + 8.0 * static_cast<double>(n)) /
          median_seconds(
              reps,
              [&] { zhost::zeropp::dequantize_add(data.data(), scales.data(), n, format, sum.data(), options); }) /
          1e9;
    }
    rows.push_back(add_row);
  }
  const double memcpy_after = memcpy_gbs();
  const double reference = std::max(memcpy_before, memcpy_after);

  std::printf("elements %lld, block %lld, reps %d, one thread\n", static_cast<long long>(n),
              static_cast<long long>(block), reps);
  std::printf("memcpy (fp32 input, read + write): %.1f GB/s before, %.1f GB/s after; reference %.1f GB/s\n\n",
              memcpy_before, memcpy_after, reference);
  std::printf(
      "| kernel | scalar GB/s (of memcpy) | avx2 GB/s (of memcpy) | avx512 GB/s (of memcpy) |\n|---|---|---|---|\n");
  for (const Row& row : rows) {
    std::printf("| %s |", row.what.c_str());
    for (const double g : row.gbs) {
      if (g == 0) {
        std::printf(" not on this CPU |");
      } else {
        std::printf(" %.1f (%.0f%%) |", g, 100 * g / reference);
      }
    }
    std::printf("\n");
  }
  return 0;
}
