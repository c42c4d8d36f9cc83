// sdk/kit/cpu_optimizer/cpu_optimizer.cpp: the fused CPU optimizer's front: argument checks, the per-call
// constants (in double), the choice of ISA (CPU detection, ZHOST_CPU_ISA), and the spread of tiles over
// a small persistent thread pool (the ISA choice itself: cpu_isa.cpp). The kernels live in
// cpu_optimizer_{scalar,avx2,avx512}.cpp.
#include "zhost/kit/cpu_optimizer.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "cpu_optimizer_kernels.hpp"

namespace zhost::cpu_optim {
namespace {

detail::KernelTable kernels(Isa isa) {
  require_isa(isa, "cpu optimizer");
#if defined(ZHOST_CPU_OPTIM_X86)
  if (isa == Isa::kAvx512) return detail::avx512_kernels();
  if (isa == Isa::kAvx2) return detail::avx2_kernels();
#endif
  return detail::scalar_kernels();
}

// Runs body(begin, end) over the tiles of [0, n), on the calling thread and `helpers` pool threads that
// take tiles from a shared counter. One job at a time: a second caller waits for the first.
class TilePool {
 public:
  using Body = std::function<void(int64_t begin, int64_t end)>;

  TilePool() = default;
  TilePool(const TilePool&) = delete;
  TilePool& operator=(const TilePool&) = delete;

  ~TilePool() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& thread : threads_) thread.join();
  }

  void run(int helpers, int64_t n, int64_t tile, const Body& body) {
    std::lock_guard<std::mutex> one_job(job_mutex_);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      while (static_cast<int>(threads_.size()) < helpers) {
        try {
          threads_.emplace_back(&TilePool::work, this, static_cast<int>(threads_.size()), generation_);
        } catch (const std::system_error&) {
          break;  // no more threads to be had: run with those there are
        }
      }
      helpers = std::min(helpers, static_cast<int>(threads_.size()));
      body_ = &body;
      n_ = n;
      tile_ = tile;
      tiles_ = (n + tile - 1) / tile;
      next_tile_.store(0, std::memory_order_relaxed);
      helpers_wanted_ = helpers;
      helpers_busy_ = helpers;
      ++generation_;
    }
    wake_.notify_all();
    take_tiles();
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return helpers_busy_ == 0; });
    body_ = nullptr;
  }

 private:
  void take_tiles() {
    for (int64_t t = next_tile_.fetch_add(1, std::memory_order_relaxed); t < tiles_;
         t = next_tile_.fetch_add(1, std::memory_order_relaxed)) {
      const int64_t begin = t * tile_;
      (*body_)(begin, std::min(n_, begin + tile_));
    }
  }

  void work(int index, uint64_t seen_generation) {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [&] { return stop_ || generation_ != seen_generation; });
      if (stop_) return;
      seen_generation = generation_;
      if (index >= helpers_wanted_) continue;
      lock.unlock();
      take_tiles();
      lock.lock();
      if (--helpers_busy_ == 0) done_.notify_all();
    }
  }

  std::mutex job_mutex_;  // held by the caller for a whole job
  std::mutex mutex_;      // guards everything below but next_tile_
  std::condition_variable wake_;
  std::condition_variable done_;
  std::vector<std::thread> threads_;
  bool stop_ = false;
  uint64_t generation_ = 0;  // one more per job
  int helpers_wanted_ = 0;   // pool threads with index below this take part in the current job
  int helpers_busy_ = 0;
  const Body* body_ = nullptr;
  int64_t n_ = 0;
  int64_t tile_ = 0;
  int64_t tiles_ = 0;
  std::atomic<int64_t> next_tile_{0};
};

// The process's pool, made on first use. A forked child gets a fresh one: its parent's threads do not
// exist there, so the inherited pool is left alone (never joined).
TilePool& pool() {
  static std::mutex mutex;
  static std::unique_ptr<TilePool> instance;
  static pid_t owner = 0;
  std::lock_guard<std::mutex> lock(mutex);
  if (!instance || owner != getpid()) {
    if (instance) (void)instance.release();
    instance = std::make_unique<TilePool>();
    owner = getpid();
  }
  return *instance;
}

void run_tiles(const StepOptions& options, int64_t n, const TilePool::Body& body) {
  const int64_t tiles = (n + options.tile - 1) / options.tile;
  const int64_t threads = options.threads > 0 ? options.threads : std::max(1u, std::thread::hardware_concurrency());
  const int64_t workers = std::min(threads, tiles);
  if (workers <= 1) {
    body(0, n);
    return;
  }
  pool().run(static_cast<int>(workers - 1), n, options.tile, body);
}

void check_common(const void* param, const void* grad, GradType grad_type, const void* exp_avg, const void* copy16,
                  Copy16 copy16_type, int64_t n, const StepOptions& options, bool adam = false) {
  auto invalid = [](const std::string& what) { throw std::invalid_argument("cpu optimizer: " + what); };
  if (n < 0) invalid("element count " + std::to_string(n) + " is negative");
  if (options.tile < 1) invalid("tile " + std::to_string(options.tile) + " must be at least 1");
  if (options.threads < 0) invalid("threads " + std::to_string(options.threads) + " must be >= 0");
  if (grad_type == GradType::kF32AsBf16 && !adam) invalid("an fp32 gradient used as bf16 is for Adam only");
  if (grad_type != GradType::kF32 && grad_type != GradType::kBf16 && grad_type != GradType::kF16 &&
      grad_type != GradType::kF32AsBf16) {
    invalid("unknown gradient type " + std::to_string(static_cast<int>(grad_type)));
  }
  if (copy16_type != Copy16::kNone && copy16_type != Copy16::kBf16 && copy16_type != Copy16::kF16) {
    invalid("unknown 16-bit copy type " + std::to_string(static_cast<int>(copy16_type)));
  }
  if (n > 0 && (param == nullptr || grad == nullptr || exp_avg == nullptr)) {
    invalid("null parameter, gradient or state buffer");
  }
  if (n > 0 && copy16_type != Copy16::kNone && copy16 == nullptr) invalid("null 16-bit copy buffer");
}

}  // namespace

void adam_step(const AdamHyper& hyper, float* param, const void* grad, GradType grad_type, float* exp_avg,
               float* exp_avg_sq, void* copy16, Copy16 copy16_type, int64_t n, const StepOptions& options) {
  adam_step_typed(hyper, param, StateType::kF32, grad, grad_type, exp_avg, exp_avg_sq, StateType::kF32, copy16,
                  copy16_type, n, options);
}

void adam_step_typed(const AdamHyper& hyper, void* param, StateType param_type, const void* grad, GradType grad_type,
                     void* exp_avg, void* exp_avg_sq, StateType state_type, void* copy16, Copy16 copy16_type, int64_t n,
                     const StepOptions& options) {
  check_common(param, grad, grad_type, exp_avg, copy16, copy16_type, n, options, /*adam=*/true);
  auto known = [](StateType t) { return t == StateType::kF32 || t == StateType::kBf16 || t == StateType::kF16; };
  if (!known(param_type) || !known(state_type))
    throw std::invalid_argument("cpu optimizer: unknown parameter or state type");
  if (state_type == StateType::kF16) throw std::invalid_argument("cpu optimizer: fp16 optimizer states are not built");
  if (state_type == StateType::kBf16 && param_type != StateType::kBf16)
    throw std::invalid_argument("cpu optimizer: bf16 optimizer states need bf16 parameters (master weights)");
  if (param_type == StateType::kBf16 && grad_type == GradType::kF16)
    throw std::invalid_argument("cpu optimizer: bf16 parameters take an fp32 or a bf16 gradient buffer, not fp16");
  if (param_type == StateType::kF16 && grad_type != GradType::kF32)
    throw std::invalid_argument("cpu optimizer: fp16 parameters take an fp32 gradient buffer");
  if (n > 0 && exp_avg_sq == nullptr) throw std::invalid_argument("cpu optimizer: null exp_avg_sq buffer");
  if (hyper.step < 1) {
    throw std::invalid_argument("cpu optimizer: Adam step count must start at 1, got " + std::to_string(hyper.step));
  }
  const detail::AdamRangeFn range = kernels(options.isa ? *options.isa : selected_isa()).adam;
  if (n == 0) return;

  const double steps = static_cast<double>(hyper.step);
  const double bias_correction1 = hyper.bias_correction ? 1.0 - std::pow(hyper.beta1, steps) : 1.0;
  const double bias_correction2 = hyper.bias_correction ? 1.0 - std::pow(hyper.beta2, steps) : 1.0;
  detail::AdamConsts consts;
  consts.grad_scale = static_cast<float>(hyper.grad_scale);
  consts.decay = static_cast<float>(hyper.decoupled ? 1.0 - hyper.lr * hyper.weight_decay : 1.0);
  consts.l2 = !hyper.decoupled && hyper.weight_decay != 0;
  consts.weight_decay = static_cast<float>(hyper.weight_decay);
  consts.beta1 = static_cast<float>(hyper.beta1);
  consts.one_minus_beta1 = static_cast<float>(1.0 - hyper.beta1);
  consts.beta2 = static_cast<float>(hyper.beta2);
  consts.one_minus_beta2 = static_cast<float>(1.0 - hyper.beta2);
  consts.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(bias_correction2));
  consts.eps = static_cast<float>(hyper.eps);
  consts.step_size = static_cast<float>(-hyper.lr / bias_correction1);

  const detail::Buffers buffers{param,  grad,        grad_type,  exp_avg,   exp_avg_sq,
                                copy16, copy16_type, param_type, state_type};
  run_tiles(options, n, [&](int64_t begin, int64_t end) { range(consts, buffers, begin, end); });
}

void floats_from_bf16(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = simd::float_from_bf16(in[i]);
}

void bf16_from_floats(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = simd::bf16_from_float(in[i]);
}

void floats_from_f16(const uint16_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = simd::float_from_f16(in[i]);
}

void f16_from_floats(const float* in, uint16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = simd::f16_from_float(in[i]);
}

void lion_step(const LionHyper& hyper, float* param, const void* grad, GradType grad_type, float* exp_avg, void* copy16,
               Copy16 copy16_type, int64_t n, const StepOptions& options) {
  check_common(param, grad, grad_type, exp_avg, copy16, copy16_type, n, options);
  const detail::LionRangeFn range = kernels(options.isa ? *options.isa : selected_isa()).lion;
  if (n == 0) return;

  detail::LionConsts consts;
  consts.grad_scale = static_cast<float>(hyper.grad_scale);
  consts.decay = static_cast<float>(1.0 - hyper.lr * hyper.weight_decay);
  consts.lr = static_cast<float>(hyper.lr);
  consts.beta1 = static_cast<float>(hyper.beta1);
  consts.one_minus_beta1 = static_cast<float>(1.0 - hyper.beta1);
  consts.beta2 = static_cast<float>(hyper.beta2);
  consts.one_minus_beta2 = static_cast<float>(1.0 - hyper.beta2);

  const detail::Buffers buffers{param, grad, grad_type, exp_avg, nullptr, copy16, copy16_type};
  run_tiles(options, n, [&](int64_t begin, int64_t end) { range(consts, buffers, begin, end); });
}

void sgd_step(const SgdHyper& hyper, float* param, const void* grad, GradType grad_type, float* momentum_buffer,
              void* copy16, Copy16 copy16_type, int64_t n, const StepOptions& options) {
  const bool momentum = hyper.momentum != 0;
  // Without momentum there is no buffer: the parameter stands in for it in the checks and is never read as one.
  check_common(param, grad, grad_type, momentum ? momentum_buffer : param, copy16, copy16_type, n, options);
  const detail::SgdRangeFn range = kernels(options.isa ? *options.isa : selected_isa()).sgd;
  if (n == 0) return;

  detail::SgdConsts consts;
  consts.grad_scale = static_cast<float>(hyper.grad_scale);
  consts.l2 = hyper.weight_decay != 0;
  consts.weight_decay = static_cast<float>(hyper.weight_decay);
  consts.momentum = momentum;
  consts.momentum_factor = static_cast<float>(hyper.momentum);
  consts.step_size = static_cast<float>(-hyper.lr);

  const detail::Buffers buffers{param, grad, grad_type, momentum_buffer, nullptr, copy16, copy16_type};
  run_tiles(options, n, [&](int64_t begin, int64_t end) { range(consts, buffers, begin, end); });
}

}  // namespace zhost::cpu_optim
