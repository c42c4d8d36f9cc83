// host/config/schema/batch.hpp: DeepSpeed's batch arithmetic, train_batch_size = train_micro_batch_size_per_gpu *
// gradient_accumulation_steps * world_size, with errors that say which number to change.
#pragma once

#include <cstdint>
#include <optional>

namespace zhost::config {

struct BatchSizes {
  int64_t train_batch_size = 0;
  int64_t micro_batch_per_gpu = 0;
  int64_t gradient_accumulation_steps = 0;
};

// Any two given sizes derive the third. Only the micro batch given: gradient_accumulation_steps = 1. Only
// train_batch given: gradient_accumulation_steps = 1 and micro = train_batch / world. Only the
// accumulation steps, or nothing, given: micro = 1 (and gradient_accumulation_steps = 1 when unset).
// Throws UsageError for a size <= 0, an inconsistent triple, or a size that does not divide; the message
// states the three numbers, the world size, the equation and which value to change.
BatchSizes resolve_batch_sizes(std::optional<int64_t> train_batch, std::optional<int64_t> micro_batch_per_gpu,
                               std::optional<int64_t> gradient_accumulation_steps, int world_size);

}  // namespace zhost::config
