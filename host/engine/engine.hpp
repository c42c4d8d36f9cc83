// host/engine/engine.hpp: one rank's whole job: process group, plugin instances, run directory, trainer.
#pragma once

#include "host/job/job_setup.hpp"
#include "host/launch/rank_env.hpp"

namespace zhost::engine {

// Registers the host's built-in plugins (stage 0). Call before prepare_job().
void register_builtin_plugins();

// Trains as rank env.rank of env.world_size; returns the process exit code (errors are thrown).
int run_training(JobSetup& job, const launch::RankEnv& env);

// "LibTorch 1.13.1 (CPU)" and the like, for `zhost version`.
std::string build_description();

// The BLAS, malloc and CPUs this process runs with, and the threads one rank would get, for `zhost version`.
std::string runtime_description();

}  // namespace zhost::engine
