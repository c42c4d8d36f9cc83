// host/engine/peak_flops.cpp: one rank's measured matmul rate (Note [Model FLOPs utilization]).
#include "host/engine/peak_flops.hpp"

#include <ATen/core/Tensor.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/randn.h>

#include <chrono>

namespace zhost::engine {

double measure_rank_tflops(c10::Device device, c10::ScalarType dtype) {
  using Clock = std::chrono::steady_clock;
  // 512: OpenBLAS is near its peak there, and a measurement costs every run little (Note [Model FLOPs
  // utilization]).
  constexpr int64_t kN = 512;
  constexpr double kMinSeconds = 0.05;
  const auto options = at::TensorOptions().device(device).dtype(dtype);
  const at::Tensor a = at::randn({kN, kN}, options), b = at::randn({kN, kN}, options);
  at::Tensor c = at::mm(a, b);
  (void)c.sum().item<double>();  // warm-up, and the device is idle from here
  int64_t rounds = 0;
  const auto start = Clock::now();
  double seconds = 0;
  do {
    for (int i = 0; i < 2; ++i) c = at::mm(a, b);
    (void)c.sum().item<double>();  // waits for the device
    rounds += 2;
    seconds = std::chrono::duration<double>(Clock::now() - start).count();
  } while (seconds < kMinSeconds);
  return 2.0 * kN * kN * kN * static_cast<double>(rounds) / seconds / 1e12;
}

}  // namespace zhost::engine
