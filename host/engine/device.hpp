// host/engine/device.hpp: the device a rank trains on, from run.device and the rank's place on its node:
// CUDA device local_rank when CUDA is asked for or available (and made current), else the CPU. Used by the
// engine, for the services that must outlive the plugin instances, and by the trainer.
#pragma once

#include <c10/core/Device.h>

#include "host/engine/settings.hpp"

namespace zhost::engine {

// True when this build has CUDA and the machine a CUDA device.
bool has_cuda_device();
// True when the job's ranks train on CUDA devices (run.device "auto" or "cuda" with a device present).
bool trains_on_cuda(const TrainSettings& settings);

// Throws a usage error, with what to set, when CUDA is asked for and absent, or a node has more ranks than
// GPUs.
at::Device training_device(const TrainSettings& settings);

}  // namespace zhost::engine
