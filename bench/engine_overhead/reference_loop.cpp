// bench/engine_overhead/reference_loop.cpp: the plain LibTorch loop: forward, loss, backward, (2+ ranks)
// one all-reduce of the flattened gradients, the global gradient norm and clipping, AdamW per parameter,
// gradients dropped. Each step does the arithmetic zhost's stage 0 does, so the losses match zhost's.
#include "bench/engine_overhead/reference_loop.hpp"

#include <ATen/ATen.h>

#include <chrono>
#include <cmath>

#include "host/core/error.hpp"
#include "host/data/data.hpp"
#include "host/model/model.hpp"
#include "host/optim/schedule.hpp"
#include "zhost/kit/grad_numerics.hpp"
#include "zhost/kit/optimizer.hpp"

namespace zhost::bench {
namespace {

using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point start, Clock::time_point end) {
  return std::chrono::duration<double, std::milli>(end - start).count();
}

// Sums every parameter's gradient over the ranks and averages it: one flat buffer, one all-reduce.
// Returns the averaged gradients, views into that buffer.
std::vector<at::Tensor> all_reduce_gradients(const std::vector<at::Tensor>& grads, comm::Comm& world) {
  std::vector<at::Tensor> flat_pieces;
  flat_pieces.reserve(grads.size());
  for (const auto& grad : grads) flat_pieces.push_back(grad.reshape({-1}));
  at::Tensor flat = at::cat(flat_pieces);
  world.all_reduce(flat);
  flat.mul_(1.0 / world.world_size());
  std::vector<at::Tensor> reduced;
  reduced.reserve(grads.size());
  int64_t offset = 0;
  for (const auto& grad : grads) {
    reduced.push_back(flat.narrow(0, offset, grad.numel()).view(grad.sizes()));
    offset += grad.numel();
  }
  return reduced;
}

// Sums of one window's phase times; finish() turns them into a WindowTiming.
struct WindowClock {
  Clock::time_point start = Clock::now();
  double forward = 0, backward = 0, reduction = 0, step = 0;

  WindowTiming finish(int64_t steps, int64_t micro_batches_per_step) const {
    const auto n = static_cast<double>(steps);
    const double micro_batches = n * static_cast<double>(micro_batches_per_step);
    return {ms_between(start, Clock::now()) / n, forward / micro_batches, backward / micro_batches, reduction / n,
            step / n};
  }
};

}  // namespace

ReferenceResult run_reference_loop(const engine::TrainSettings& settings, comm::Comm* world, int64_t warmup_steps) {
  const int64_t window_steps = settings.steps_per_print;
  if (warmup_steps < 0 || settings.steps <= warmup_steps || (settings.steps - warmup_steps) % window_steps != 0)
    fail_usage("steps ({}) minus the warm-up ({}) must be a positive multiple of steps_per_print ({})", settings.steps,
               warmup_steps, window_steps);
  std::unique_ptr<model::Model> model = model::make_model(settings.model, at::kCPU, at::kFloat);
  data::DataLoader loader(settings.data);
  std::unique_ptr<kit::Optimizer> optimizer = kit::make_optimizer(settings.optimizer);
  std::unique_ptr<optim::LrSchedule> schedule = optim::make_schedule(settings.schedule, settings.optimizer.lr);

  const auto& params = model->parameters();
  std::vector<at::Tensor> weights;  // the parameters' storage without autograd, for the optimizer
  for (const auto& p : params) weights.push_back(p.tensor.detach());
  std::vector<kit::OptimizerState> states(params.size());

  const int64_t gas = settings.batch.gradient_accumulation_steps;
  const int world_size = world ? world->world_size() : 1;
  ReferenceResult result;
  result.blocks = static_cast<int64_t>(model->num_blocks());
  result.params = static_cast<int64_t>(params.size());
  result.num_parameters = model->num_parameters();
  int64_t applied = 0;
  WindowClock window;
  for (int64_t step = 1; step <= settings.steps; ++step) {
    if (step > warmup_steps && (step - warmup_steps - 1) % window_steps == 0) window = WindowClock{};
    double loss_sum = 0;
    for (int64_t micro = 0; micro < gas; ++micro) {
      data::Batch batch = loader.next(step - 1, micro);
      auto start = Clock::now();
      at::Tensor loss = model->loss(model->forward(batch.tokens), batch.targets);
      auto forward_end = Clock::now();
      (gas == 1 ? loss : loss.mul(1.0 / static_cast<double>(gas))).backward();
      auto backward_end = Clock::now();
      window.forward += ms_between(start, forward_end);
      window.backward += ms_between(forward_end, backward_end);
      loss_sum += loss.item<double>();
    }

    auto reduction_start = Clock::now();
    std::vector<at::Tensor> grads;
    grads.reserve(params.size());
    for (const auto& p : params)
      grads.push_back(p.tensor.grad().defined() ? p.tensor.grad() : at::zeros_like(p.tensor));
    if (world_size > 1) grads = all_reduce_gradients(grads, *world);
    auto step_start = Clock::now();
    window.reduction += ms_between(reduction_start, step_start);

    double norm = kit::global_grad_norm(grads);
    if (std::isfinite(norm)) {
      double coefficient = kit::clip_coefficient(norm, settings.gradient_clipping);
      if (coefficient < 1) kit::scale_in_place(grads, coefficient);
      double lr = schedule->lr_for_step(applied + 1);
      ++applied;
      for (size_t i = 0; i < params.size(); ++i) optimizer->step(weights[i], grads[i], states[i], applied, lr);
    }
    for (const auto& p : params) p.tensor.mutable_grad() = at::Tensor();
    window.step += ms_between(step_start, Clock::now());
    result.step_losses.push_back(loss_sum / static_cast<double>(gas));
    if (step > warmup_steps && (step - warmup_steps) % window_steps == 0)
      result.windows.push_back(window.finish(window_steps, gas));
  }

  if (world_size > 1) {  // after the timed windows: the losses averaged over ranks, as zhost prints them
    at::Tensor losses = at::tensor(result.step_losses, at::kDouble);
    world->all_reduce(losses);
    losses.div_(world_size);
    result.step_losses.assign(losses.data_ptr<double>(), losses.data_ptr<double>() + losses.numel());
  }
  return result;
}

}  // namespace zhost::bench
