// host/cli/run_command.cpp: `zhost run CONFIG`: checks the job, then either starts and supervises
// --nproc local ranks that each run this same command, or trains as one rank of a job (a rank started by
// zhost's launcher, by torchrun, Slurm or Open MPI, or the single process of a one-rank run).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>

#include "host/cli/commands.hpp"
#include "host/core/error.hpp"
#include "host/core/log.hpp"

#if ZHOST_HAS_ENGINE
#include "host/engine/device.hpp"
#include "host/engine/engine.hpp"
#include "host/engine/native_libs.hpp"
#include "host/engine/preflight.hpp"
#include "host/launch/launcher.hpp"
#include "host/launch/rank_env.hpp"
#endif

namespace zhost::cli {

#if ZHOST_HAS_ENGINE
namespace {

constexpr double kStoppedRankSlack_s = 5;

// One rank of a job: its place comes from the environment (zhost's launcher, torchrun, Slurm, Open MPI).
int run_rank(const RunOptions& options) {
  const bool is_launched_rank = std::getenv("ZHOST_LAUNCHED") != nullptr;
  engine::apply_log_environment();
  launch::RankEnv env = launch::detect_rank_env(launch::current_env());
  if (is_launched_rank) launch::name_this_rank_process(env.rank);
  if (env.world_size > 1) launch::check_address_resolves(env.master_addr, "MASTER_ADDR (from " + env.source + ")");
  // Ranks started by zhost's launcher already get a "[rank N]" prefix on every line.
  if (env.world_size > 1 && !is_launched_rank) log::set_rank(env.rank);
  JobSetup job = prepare_job(options.job);
  if (!options.log_level_from_command_line) spdlog::set_level(log::parse_level(job.config->get_string("log.level")));
  if (env.rank == 0) {
    for (const auto& line : job.infos) spdlog::info("config: {}", line);
    for (const auto& line : job.config->warnings()) spdlog::warn("config: {}", line);
  }
  return engine::run_training(job, env);
}

}  // namespace
#endif

int run_command(const RunOptions& options) {
#if ZHOST_HAS_ENGINE
  const bool is_launched_rank = std::getenv("ZHOST_LAUNCHED") != nullptr;
  if (options.nproc > 0 && !is_launched_rank) {
    launch::LaunchOptions launch;
    launch.nproc = options.nproc;
    launch.nnodes = options.nnodes;
    launch.node_rank = options.node_rank;
    launch.master_addr = options.master_addr;
    launch.master_port = options.master_port;
    // The options first, then the job once here, so that bad options, a bad config, missing data or a model
    // too large for this machine fail before any rank starts.
    launch::check_launch_options(launch);
    engine::keep_cuda_out_of_this_process();  // Note [No CUDA before fork]
    JobSetup job = prepare_job(options.job);
    engine::check_data(*job.config);
    engine::check_precision(*job.config);
    engine::check_cpu_threads(*job.config, options.nproc);
    check_node_layout(*job.config, options.nproc, options.nnodes);
    const int world_size = options.nproc * options.nnodes;
    const engine::TrainSettings settings = engine::read_settings(*job.config, world_size, 0, 0, options.nproc);
    engine::check_host_memory(*job.config, settings, world_size, options.nproc);
    engine::check_plugins(job, settings, world_size, options.nproc);
    // The ranks notice a stopped peer after comm.timeout_s and name it; the launcher steps in a little later.
    launch.stopped_rank_limit_s = job.config->get_float("comm.timeout_s") + kStoppedRankSlack_s;
    // Ranks that save a checkpoint on a signal get the time of a collective to do it (Note [Stop at a step
    // boundary]) before the launcher kills them.
    if (job.config->get_bool("checkpoint.on_signal") &&
        (job.config->get_int("checkpoint.interval") > 0 || job.config->get_bool("checkpoint.at_end")))
      launch.grace_period_s = std::max(launch.grace_period_s, launch.stopped_rank_limit_s);
    // Each rank a fork of this process, LibTorch already loaded (Note [Forked ranks]): the logger is made
    // again for the pipe that is now stderr, at the level this process runs with.
    launch.rank_main = [&options, level = spdlog::get_level()] {
      return report_errors([&] {
        log::init(level);
        return run_rank(options);
      });
    };
    return launch::launch_local_ranks(launch);
  }
  return run_rank(options);
#else
  prepare_job(options.job);
  fail_usage("this zhost was built without the training engine (ZHOST_WITH_TORCH=OFF): rebuild with LibTorch to train");
#endif
}

}  // namespace zhost::cli
