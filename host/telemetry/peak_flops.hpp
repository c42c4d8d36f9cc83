// host/telemetry/peak_flops.hpp: the job's peak FLOP/s, against which each step's model FLOP/s becomes MFU.
//
// Note [Model FLOPs utilization]: MFU = the model's FLOP/s (flops_per_token x tokens/s, all ranks together:
// StepRecord::tflops) / the job's peak. The peak is run.peak_tflops when set (a datasheet figure, say), else
// measured once at start: every rank at the same time, with its own intra-op threads (all of the rank's
// threads, as its training uses them), times square matmuls in its compute dtype (fp32 on CPU), doubling the
// size from 512 until one takes 20 ms (at most 4096), and takes the fastest of those it runs in about 0.25 s:
// the best rate this rank's BLAS reaches, where the first figure (a 512x512 mean over 0.05 s) was often
// below what the job's own larger matmuls reached, giving MFU above 100% (145% on a DeepSpeed JSON job). The
// job's peak is the sum over ranks; run.log names the size, threads and rate. On CPU that is what this
// machine's BLAS reaches with the threads the ranks have, not a datasheet peak (bench/vs_pytorch computes
// its own MFU against the best of 20 1024x1024 sgemms in one process); MFU stays below 100% as long as the
// job's matmuls are no faster than the best one measured, which a step of many smaller ones does not beat.
// On CUDA it is the device's dense matmul rate in the compute dtype, a lower bound of its datasheet peak
// (that path has never run on a GPU: set run.peak_tflops there).
#pragma once

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>

namespace zhost::engine {

struct PeakMeasurement {
  double tflops = 0;  // the fastest matmul's rate
  int64_t size = 0;   // its side
  int threads = 0;    // the intra-op threads it ran on
};

// This rank's best matmul rate, measured now (about 0.3 s; blocks until the device is done).
PeakMeasurement measure_rank_tflops(c10::Device device, c10::ScalarType dtype);

}  // namespace zhost::engine
