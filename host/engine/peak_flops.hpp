// host/engine/peak_flops.hpp: the job's peak FLOP/s, against which each step's model FLOP/s becomes MFU.
//
// Note [Model FLOPs utilization]: MFU = the model's FLOP/s (flops_per_token x tokens/s, all ranks together:
// StepRecord::tflops) / the job's peak. The peak is run.peak_tflops when set (a datasheet figure, say), else
// measured once at start: every rank at the same time times square matmuls (512, in its compute dtype;
// fp32 on CPU) with its own intra-op threads for about 0.05 s, and the job's peak is the sum over ranks. On
// CPU that is what this machine's BLAS reaches with the threads the ranks have, not a datasheet peak
// (bench/vs_pytorch computes its own MFU against the best of 20 1024x1024 sgemms in one process, a
// different figure); on CUDA it is the device's dense matmul rate in the compute dtype, a lower bound of its
// datasheet peak, likely far below it at this size (launch-bound; that path has never run on a GPU: set
// run.peak_tflops there).
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

namespace zhost::engine {

// This rank's matmul rate in TFLOP/s, measured now (about 0.05 s; blocks until the device is done).
double measure_rank_tflops(c10::Device device, c10::ScalarType dtype);

}  // namespace zhost::engine
