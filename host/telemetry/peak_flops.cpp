// host/telemetry/peak_flops.cpp: one rank's measured matmul rate (Note [Model FLOPs utilization]).
#include "host/telemetry/peak_flops.hpp"

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/randn.h>

#include <algorithm>
#include <chrono>

namespace zhost::engine {

PeakMeasurement measure_rank_tflops(c10::Device device, c10::ScalarType dtype) {
  using Clock = std::chrono::steady_clock;
  // Note [Model FLOPs utilization]: the size doubles from 512 until one matmul takes kMinMatmulSeconds (a
  // size where BLAS is at its best, not launch- or cache-bound), at most kMaxN; then the fastest single matmul
  // of those run within kBudgetSeconds (at least kMinRounds) is the rate: the best this rank's BLAS reached.
  constexpr int64_t kMaxN = 4096;
  constexpr double kMinMatmulSeconds = 0.02;
  constexpr double kBudgetSeconds = 0.25;
  constexpr int kMinRounds = 3;
  const auto options = at::TensorOptions().device(device).dtype(dtype);
  auto time_one = [](const at::Tensor& a, const at::Tensor& b) {
    const auto start = Clock::now();
    at::Tensor c = at::mm(a, b);
    (void)c.select(0, 0).select(0, 0).item<double>();  // waits for the device
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  int64_t n = 512;
  at::Tensor a = at::randn({n, n}, options), b = at::randn({n, n}, options);
  time_one(a, b);  // warm-up
  while (n < kMaxN && time_one(a, b) < kMinMatmulSeconds) {
    n *= 2;
    a = at::randn({n, n}, options);
    b = at::randn({n, n}, options);
  }
  double best = time_one(a, b);
  const auto start = Clock::now();
  for (int round = 1;
       round < kMinRounds || std::chrono::duration<double>(Clock::now() - start).count() < kBudgetSeconds; ++round)
    best = std::min(best, time_one(a, b));
  PeakMeasurement m;
  m.size = n;
  m.threads = at::get_num_threads();
  m.tflops = 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / best / 1e12;
  return m;
}

}  // namespace zhost::engine
