// host/engine/device.hpp: the device a rank trains on, from run.device and the rank's place on its node:
// CUDA device local_rank when CUDA is asked for or available (and made current), else the CPU. Used by the
// engine, for the services that must outlive the plugin instances, and by the trainer.
#pragma once

#include <c10/core/Device.h>

#include "host/engine/settings.hpp"

namespace zhost::engine {

// Note [No CUDA before fork]
// CUDA does not survive fork: the child of a process that has called into the CUDA runtime, even only to count
// devices, cannot use CUDA. zhost's launcher checks the job before it forks the ranks (Note [Forked ranks]), and
// some checks depend on whether the ranks will train on a GPU. So the launcher calls
// keep_cuda_out_of_this_process() first; from then on has_cuda_device() asks a child process, which counts the
// devices, writes the count to a pipe and exits, and the launcher itself never touches CUDA
// (tests/training/supervision_test.cpp, LauncherNeverCallsCuda).
void keep_cuda_out_of_this_process();

// True when this build has CUDA and the machine a CUDA device.
bool has_cuda_device();
// True when the job's ranks train on CUDA devices (run.device "auto" or "cuda" with a device present).
bool trains_on_cuda(const TrainSettings& settings);

// Throws a usage error, with what to set, when CUDA is asked for and absent, or a node has more ranks than
// GPUs (allowed by debug.share_cuda_device: local rank r then trains on device r mod GPUs).
at::Device training_device(const TrainSettings& settings);

}  // namespace zhost::engine
