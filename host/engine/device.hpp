// host/engine/device.hpp: the device a rank trains on, from run.device and the rank's place on its node:
// CUDA device local_rank when CUDA is asked for or available (and made current), else the CPU. Used by the
// engine, for the services that must outlive the plugin instances, and by the trainer.
#pragma once

#include <c10/core/Device.h>

#include "host/engine/settings.hpp"

namespace zhost::engine {

// Throws a usage error, with what to set, when CUDA is asked for and absent, or a node has more ranks than
// GPUs.
at::Device training_device(const TrainSettings& settings);

}  // namespace zhost::engine
