// host/config/schema/batch.cpp: resolving train batch, micro batch and gradient accumulation the DeepSpeed way.
#include "host/config/schema/batch.hpp"

#include <fmt/format.h>

#include <string>

#include "host/core/error.hpp"

namespace zhost::config {
namespace {

constexpr const char* kEquation =
    "train_batch_size = train_micro_batch_size_per_gpu * gradient_accumulation_steps * world_size";
constexpr const char* kTrainBatch = "train_batch_size";
constexpr const char* kMicroBatch = "train_micro_batch_size_per_gpu";
constexpr const char* kAccumulation = "gradient_accumulation_steps";

void require_positive(std::optional<int64_t> value, const char* name) {
  if (value && *value <= 0) {
    fail_usage("{} = {} must be at least 1; set it to a positive number, or remove it to have it derived ({})", name,
               *value, kEquation);
  }
}

int64_t checked_product(int64_t a, int64_t b) {
  int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) {
    fail_usage("batch sizes {} * {} overflow a 64-bit integer; use smaller batch sizes ({})", a, b, kEquation);
  }
  return product;
}

// One size of the product train_batch = known * unknown * world, named for messages.
struct Factor {
  const char* name;
  int64_t value;
  bool given;  // false: a default of 1, not in the config
};

// Derives the unknown factor of train_batch = known * unknown * world; it must come out a whole number.
int64_t derive_factor(int64_t train_batch, const Factor& known, const char* unknown_name, int64_t world_size) {
  int64_t per_unit = checked_product(known.value, world_size);
  if (train_batch % per_unit == 0) return train_batch / per_unit;
  int64_t lower = train_batch / per_unit * per_unit;
  int64_t upper = lower + per_unit;
  std::string multiples = lower > 0 ? fmt::format("{} or {}", lower, upper) : std::to_string(upper);
  fail_usage(
      "{} = {} is not a multiple of {}{} * world_size = {} * {} = {}, so {} would be {} / {} = {:.4g} ({}); set {} to "
      "{}, or change {}",
      kTrainBatch, train_batch, known.name, known.given ? "" : " (not set, so 1)", known.value, world_size, per_unit,
      unknown_name, train_batch, per_unit, static_cast<double>(train_batch) / static_cast<double>(per_unit), kEquation,
      kTrainBatch, multiples, known.given ? known.name : unknown_name);
}

}  // namespace

BatchSizes resolve_batch_sizes(std::optional<int64_t> train_batch, std::optional<int64_t> micro_batch_per_gpu,
                               std::optional<int64_t> gradient_accumulation_steps, int world_size) {
  if (world_size <= 0) fail("resolve_batch_sizes: world size {} is not positive (a zhost bug)", world_size);
  require_positive(train_batch, kTrainBatch);
  require_positive(micro_batch_per_gpu, kMicroBatch);
  require_positive(gradient_accumulation_steps, kAccumulation);
  const int64_t world = world_size;

  BatchSizes sizes;
  if (train_batch && micro_batch_per_gpu && gradient_accumulation_steps) {
    int64_t product = checked_product(checked_product(*micro_batch_per_gpu, *gradient_accumulation_steps), world);
    if (product != *train_batch) {
      fail_usage(
          "{} = {} does not match {} * {} * world_size = {} * {} * {} = {} ({}); set {} to {} or remove it, or "
          "change {} or {}",
          kTrainBatch, *train_batch, kMicroBatch, kAccumulation, *micro_batch_per_gpu, *gradient_accumulation_steps,
          world, product, kEquation, kTrainBatch, product, kMicroBatch, kAccumulation);
    }
    sizes = {*train_batch, *micro_batch_per_gpu, *gradient_accumulation_steps};
  } else if (train_batch && micro_batch_per_gpu) {
    int64_t steps = derive_factor(*train_batch, {kMicroBatch, *micro_batch_per_gpu, true}, kAccumulation, world);
    sizes = {*train_batch, *micro_batch_per_gpu, steps};
  } else if (train_batch) {
    // Gradient accumulation steps given, or 1 when not: the micro batch follows.
    Factor steps{kAccumulation, gradient_accumulation_steps.value_or(1), gradient_accumulation_steps.has_value()};
    int64_t micro = derive_factor(*train_batch, steps, kMicroBatch, world);
    sizes = {*train_batch, micro, steps.value};
  } else {
    // No train batch: it follows from the micro batch (default 1) and the accumulation steps (default 1).
    int64_t micro = micro_batch_per_gpu.value_or(1);
    int64_t steps = gradient_accumulation_steps.value_or(1);
    sizes = {checked_product(checked_product(micro, steps), world), micro, steps};
  }
  return sizes;
}

}  // namespace zhost::config
