// bench/engine_overhead/main.cpp: bench_engine_overhead, the harness behind run.sh.
//   reference CONFIG [--set K=V]... [--nproc N] --warmup W --out FILE
//       the plain LibTorch loop on the config's model, data and optimizer; with --nproc, N local ranks
//       (zhost's launcher) joined by one Gloo group; rank 0 writes the timings as JSON
//   hooks CONFIG [--set K=V]... [Google Benchmark flags]
//       per-call costs of partition hooks and DLPack views
//   report DIR
//       the tables of RESULTS.md from a run.sh results folder
#include <ATen/Parallel.h>

#include <CLI/CLI.hpp>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include "bench/engine_overhead/hook_microbench.hpp"
#include "bench/engine_overhead/reference_loop.hpp"
#include "bench/engine_overhead/report.hpp"
#include "host/config/schema/validate.hpp"
#include "host/core/error.hpp"
#include "host/core/log.hpp"
#include "host/engine/engine.hpp"
#include "host/launch/launcher.hpp"
#include "host/launch/rank_env.hpp"

namespace {

using namespace zhost;

struct ReferenceOptions {
  JobSetupOptions job;
  int nproc = 0;
  int64_t warmup_steps = 5;
  std::string out_file;
};

void add_job_options(CLI::App* command, JobSetupOptions& job) {
  command->add_option("config", job.config_file, "the bench's TOML config (as given to zhost run)")
      ->required()
      ->check(CLI::ExistingFile);
  command->add_option("--set", job.overrides, "override a config key, as zhost run --set (repeatable)");
}

nlohmann::json describe(const bench::ReferenceResult& r, const engine::TrainSettings& s, int world_size,
                        int64_t warmup_steps) {
  nlohmann::json windows = nlohmann::json::array();
  for (const auto& w : r.windows)
    windows.push_back({{"ms_per_step", w.ms_per_step},
                       {"forward_ms", w.forward_ms},
                       {"backward_ms", w.backward_ms},
                       {"reduction_ms", w.reduction_ms},
                       {"step_ms", w.step_ms}});
  return {{"world_size", world_size},
          {"threads_per_rank", at::get_num_threads()},
          {"train_batch_size", s.batch.train_batch_size},
          {"gradient_accumulation_steps", s.batch.gradient_accumulation_steps},
          {"micro_batch", s.batch.micro_batch_per_gpu},
          {"layers", s.model.layers},
          {"width", s.model.width},
          {"seq_len", s.model.seq_len},
          {"num_parameters", r.num_parameters},
          {"blocks", r.blocks},
          {"params", r.params},
          {"steps", s.steps},
          {"steps_per_print", s.steps_per_print},
          {"warmup_steps", warmup_steps},
          {"windows", windows},
          {"step_losses", r.step_losses}};
}

int run_reference(const ReferenceOptions& options) {
  if (options.nproc > 1 && std::getenv("ZHOST_LAUNCHED") == nullptr) {
    prepare_job(options.job);  // a bad config fails here, before any rank starts
    launch::LaunchOptions launch;
    launch.nproc = options.nproc;  // each rank runs this same command line
    return launch::launch_local_ranks(launch);
  }
  launch::RankEnv env = launch::detect_rank_env(launch::current_env());
  JobSetup job = prepare_job(options.job);
  engine::TrainSettings settings =
      engine::read_settings(*job.config, env.world_size, env.rank, env.local_rank, env.local_world_size);

  std::unique_ptr<comm::Comm> world;
  if (env.world_size > 1) {
    comm::Rendezvous rendezvous{env.rank,
                                env.world_size,
                                env.master_addr,
                                env.master_port,
                                settings.comm_timeout_s,
                                env.node,
                                env.local_world_size,
                                launch::describe_source(env.source)};
    comm::CommOptions comm_options;
    comm_options.backend = comm::Backend::kGloo;
    comm_options.timeout_s = settings.comm_timeout_s;
    world = comm::Comm::create(rendezvous, comm_options);
  }
  bench::ReferenceResult result = bench::run_reference_loop(settings, world.get(), options.warmup_steps);
  if (env.rank == 0) {
    std::ofstream out(options.out_file);
    out << describe(result, settings, env.world_size, options.warmup_steps).dump(1) << "\n";
    if (!out) fail("cannot write {}", options.out_file);
  }
  if (world) world->barrier();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_engine_overhead: zhost's step time against a plain LibTorch loop (see run.sh)"};
  app.require_subcommand(1);

  ReferenceOptions reference;
  CLI::App* reference_cmd = app.add_subcommand("reference", "time the plain LibTorch training loop");
  add_job_options(reference_cmd, reference.job);
  reference_cmd->add_option("--nproc", reference.nproc, "local ranks (one process each)");
  reference_cmd->add_option("--warmup", reference.warmup_steps, "steps left out of the timing")->capture_default_str();
  reference_cmd->add_option("--out", reference.out_file, "where rank 0 writes its JSON")->required();

  JobSetupOptions hooks_job;
  CLI::App* hooks_cmd = app.add_subcommand("hooks", "micro-benchmark partition hook calls and DLPack views");
  add_job_options(hooks_cmd, hooks_job);
  hooks_cmd->allow_extras();  // Google Benchmark's --benchmark_* flags

  std::string results_dir;
  CLI::App* report_cmd = app.add_subcommand("report", "print the tables from a run.sh results folder");
  report_cmd->add_option("dir", results_dir, "the results folder")->required()->check(CLI::ExistingDirectory);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : static_cast<int>(ExitCode::kUsage);
  }

  try {
    log::init("warn");
    engine::register_builtin_plugins();
    if (*reference_cmd) return run_reference(reference);
    if (*report_cmd) {
      bench::print_report(results_dir);
      return 0;
    }
    JobSetup job = prepare_job(hooks_job);
    std::vector<std::string> benchmark_args{argv[0]};
    for (const auto& extra : hooks_cmd->remaining()) benchmark_args.push_back(extra);
    std::vector<char*> benchmark_argv;
    for (auto& arg : benchmark_args) benchmark_argv.push_back(arg.data());
    return bench::run_hook_benchmarks(job, static_cast<int>(benchmark_argv.size()), benchmark_argv.data());
  } catch (const config::ConfigErrors& e) {
    for (const auto& line : e.errors()) std::cerr << "bench_engine_overhead: error: " << line << "\n";
    return e.exit_code();
  } catch (const Error& e) {
    std::cerr << "bench_engine_overhead: error: " << e.what() << "\n";
    return e.exit_code();
  } catch (const std::exception& e) {
    std::cerr << "bench_engine_overhead: error: " << e.what() << "\n";
    return static_cast<int>(ExitCode::kRuntime);
  }
}
