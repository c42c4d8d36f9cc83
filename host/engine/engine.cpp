// host/engine/engine.cpp: wires a checked job to a process group, plugin instances and the trainer.
#include "host/engine/engine.hpp"

#include <c10/util/Exception.h>
#include <spdlog/spdlog.h>
#include <torch/version.h>

#include <algorithm>
#include <fstream>

#include "host/core/error.hpp"
#include "host/core/log.hpp"
#include "host/core/text.hpp"
#include "host/engine/cpu_threads.hpp"
#include "host/engine/device.hpp"
#include "host/engine/native_libs.hpp"
#include "host/engine/preflight.hpp"
#include "host/engine/storage_swap.hpp"
#include "host/engine/trainer.hpp"
#include "host/launch/launcher.hpp"
#include "host/model/model.hpp"
#include "host/plugins/loader.hpp"
#include "host/services/collectives_adapter.hpp"
#include "host/services/comm_kv_store.hpp"
#include "host/services/device_copies.hpp"
#include "host/telemetry/comm_observer.hpp"
#include "host/telemetry/model_states.hpp"
#include "host/telemetry/trace.hpp"
#include "plugins/stage0/stage0.h"

namespace zhost::engine {

void register_builtin_plugins() { register_builtin_plugin("stage0", zhost_stage0_plugin_v1); }

std::string build_description() {
#if ZHOST_WITH_CUDA
  const char* cuda = "CUDA";
#else
  const char* cuda = "CPU only";
#endif
  return fmt::format("training engine: LibTorch {} ({})", TORCH_VERSION, cuda);
}

std::string runtime_description() {
  const CpuBudget budget = read_cpu_budget();
  const ThreadPlan plan = plan_threads(budget, thread_request(0, false, 0, 1));
  return fmt::format("CPU: {}; {} usable CPU(s) ({}{}); a single rank runs {} intra-op thread(s) ({})",
                     native_libs_summary(), budget.usable_cpus.size(), cpu_list_text(budget.usable_cpus),
                     budget.quota_cpus ? fmt::format(", cgroup quota {:.2f}", *budget.quota_cpus) : "", plan.threads,
                     plan.origin);
}

namespace {

int run_job(JobSetup& job, const launch::RankEnv& env);

// Threads and CPUs of this rank (Note [CPU threads per rank]); rank 0 says what every local rank got and
// what the process runs on, and warns where that will be slow.
void set_up_cpu_threads(const TrainSettings& settings, const launch::RankEnv& env) {
  const CpuBudget budget = read_cpu_budget();
  auto request_for = [&](int local_rank) {
    return thread_request(settings.intra_op_threads, settings.pin_ranks, local_rank, env.local_world_size);
  };
  const ThreadPlan plan = plan_threads(budget, request_for(env.local_rank));
  apply_thread_plan(plan);
  if (settings.pin_ranks) spdlog::info("rank {} (local {}) runs {}", env.rank, env.local_rank, threads_in_effect());
  if (env.rank != 0) return;
  std::string pinning;
  if (settings.pin_ranks) {
    std::vector<std::string> slices;
    for (int local = 0; local < env.local_world_size; ++local)
      slices.push_back(cpu_list_text(plan_threads(budget, request_for(local)).cpus));
    pinning = fmt::format(", local ranks bound to CPUs {}", text::join(slices, " | "));
  }
  spdlog::info("CPU: {}; {} intra-op thread(s) per rank ({}) x {} local rank(s) on {} usable CPU(s){}",
               native_libs_summary(), plan.threads, plan.origin, env.local_world_size, budget.usable_cpus.size(),
               pinning);
  const BlasInfo blas = blas_in_use();
  if (blas.reference)
    spdlog::warn(
        "LibTorch's matrix products run on the reference BLAS ({}), about 20x slower than an optimised "
        "one; install libopenblas0-openmp and select it for libblas.so.3 (scripts/setup-deps does both)",
        blas.path);
  if (plan.oversubscribed)
    spdlog::warn(
        "{} thread(s) per rank x {} local rank(s) exceed the {} usable CPU(s): threads will wait on each "
        "other; lower {} or leave it to zhost",
        plan.threads, env.local_world_size, budget.usable_cpus.size(), plan.origin);
}

// Hands the offload tiers of the resolution (role -> tier, checked at config check) to the host services
// (tier_for), for the partition plugin and a computing tier's storage, and takes them back before the
// instances go. The instances themselves were created tiers first (docs/abi.md "Tier lifetimes").
class TierInstallation {
 public:
  TierInstallation(const JobSetup& job, const PluginInstances& instances, HostServices& services)
      : services_(services) {
    for (const auto& [role, provider] : job.resolution.tiers) {
      roles_.push_back(role);
      for (const auto& live : instances.all())
        if (live.plugin == provider && (live.tier_role == 0 || live.tier_role == static_cast<uint32_t>(role)))
          services_.set_tier(role, TierRef{live.instance, live.plugin->api, live.plugin->info.name});
    }
  }
  ~TierInstallation() {
    for (zhost_tier_role role : roles_) services_.set_tier(role, std::nullopt);
  }
  TierInstallation(const TierInstallation&) = delete;
  TierInstallation& operator=(const TierInstallation&) = delete;

 private:
  HostServices& services_;
  std::vector<zhost_tier_role> roles_;
};

// Offers the job's collectives to its collective transform, if it has one (Note [Collective transforms]), and
// stops before the instances go.
class TransformInstallation {
 public:
  TransformInstallation(const PluginInstances& instances, CollectivesAdapter& collectives) : collectives_(collectives) {
    if (const PluginInstance* transform = instances.of_kind(ZHOST_KIND_COLLECTIVE))
      collectives_.set_transform(transform->instance, transform->plugin->api->collective);
  }
  ~TransformInstallation() { collectives_.set_transform(nullptr, nullptr); }
  TransformInstallation(const TransformInstallation&) = delete;
  TransformInstallation& operator=(const TransformInstallation&) = delete;

 private:
  CollectivesAdapter& collectives_;
};

// What a failed allocation means for this job, in one line: what ran out, and what to change.
[[noreturn]] void fail_out_of_memory(const std::string& what, const JobSetup& job, const launch::RankEnv& env) {
  std::string states;
  try {
    const TrainSettings settings =
        read_settings(*job.config, env.world_size, env.rank, env.local_rank, env.local_world_size);
    const int64_t psi = parameter_count(settings);  // the model's size without building it
    states = fmt::format("; its model states need {:.0f} MB per rank at ZeRO stage {} on {} rank(s) (Ψ = {})",
                         zero_formula(model_state_shape(settings, env.world_size, psi)).total() / 1e6,
                         settings.zero_stage, env.world_size, psi);
  } catch (const std::exception&) {
  }
  throw Error(
      fmt::format("out of memory on rank {}: {}{}; use zero.stage = 3 (and more ranks), offload the optimizer, "
                  "or a smaller model or micro-batch",
                  env.rank, what, states));
}

// Rank 0's run directory path, the same on every rank (a timestamp name is rank 0's), through the store.
std::string shared_run_path(const TrainSettings& settings, comm::Comm& world) {
  const std::string key = "zhost/run_dir";
  if (world.rank() == 0) {
    const std::string path = run_directory_path(settings.run_dir, settings.run_name);
    world.store_set(key, std::vector<uint8_t>(path.begin(), path.end()));
    return path;
  }
  std::optional<std::vector<uint8_t>> value = world.store_get(key, settings.comm_timeout_s);
  if (!value) throw Error("rank 0 did not publish the run directory in time (comm.timeout_s)", ExitCode::kRankFailed);
  return std::string(value->begin(), value->end());
}

// What a run observes besides its metrics: the trace (run.trace), the comms logger, plugins' spans in the
// trace. Installed into the services that produce the events for as long as it lives.
class Observation {
 public:
  Observation(const TrainSettings& settings, const std::string& run_path, const launch::RankEnv& env,
              CollectivesAdapter& collectives, HostServices& services)
      : settings_(settings), run_path_(run_path), rank_(env.rank), collectives_(collectives), services_(services) {
    if (settings.trace) {
      const bool cuda = training_device(settings).is_cuda();
      trace_ = std::make_unique<TraceWriter>(fmt::format("{}/trace.rank{}.json", run_path, env.rank), env.rank,
                                             env.world_size, cuda ? "nccl" : "gloo");
      services_.set_span_sink([trace = trace_.get()](const std::string& plugin, const std::string& name,
                                                     uint64_t begin_ns, uint64_t end_ns) {
        trace->complete("plugin", plugin + "/" + name, begin_ns, end_ns);
      });
    }
    observer_ = std::make_unique<CommObserver>(trace_.get(), settings.comms_logger, settings.comms_logger_verbose);
    if (observer_->active()) collectives_.set_observer(observer_.get());
  }
  ~Observation() {
    collectives_.set_observer(nullptr);
    services_.set_span_sink({});
  }
  Observation(const Observation&) = delete;
  Observation& operator=(const Observation&) = delete;

  TraceWriter* trace() const { return trace_.get(); }
  // comms_logger: every rank writes RUN_DIR/comms.rankN.json, rank 0 logs DeepSpeed's table.
  void finish() const {
    if (!settings_.comms_logger) return;
    std::ofstream(fmt::format("{}/comms.rank{}.json", run_path_, rank_)) << observer_->summary_json() << "\n";
    if (rank_ == 0) spdlog::info("comms_logger summary (rank 0):\n{}", observer_->summary_table());
  }

 private:
  const TrainSettings& settings_;
  std::string run_path_;
  int rank_;
  CollectivesAdapter& collectives_;
  HostServices& services_;
  std::unique_ptr<TraceWriter> trace_;
  std::unique_ptr<CommObserver> observer_;
};

// The first line of an exception's message (LibTorch's carry a backtrace below it).
std::string first_line(const char* message) {
  std::string text = message;
  return text.substr(0, text.find('\n'));
}

bool is_allocation_failure(const std::string& message) {
  return message.find("can't allocate memory") != std::string::npos ||
         message.find("out of memory") != std::string::npos;
}

}  // namespace

int run_training(JobSetup& job, const launch::RankEnv& env) {
  try {
    return run_job(job, env);
  } catch (const std::bad_alloc&) {
    fail_out_of_memory("an allocation failed", job, env);
  } catch (const OutOfMemoryError& e) {  // ZHOST_ERR_OUT_OF_MEMORY from a plugin or a host service
    fail_out_of_memory(e.what(), job, env);
  } catch (const Error& e) {  // LibTorch's allocation failures inside a plugin come back as its message
    if (is_allocation_failure(e.what())) fail_out_of_memory(e.what(), job, env);
    throw;
  } catch (const c10::Error& e) {
    // LibTorch's errors carry a backtrace: keep the first line, the one that says what went wrong.
    std::string message = e.what_without_backtrace();
    message = message.substr(0, message.find('\n'));
    if (is_allocation_failure(message)) fail_out_of_memory(message, job, env);
    throw Error("LibTorch: " + message);
  }
}

namespace {

int run_job(JobSetup& job, const launch::RankEnv& env) {
  TrainSettings settings = read_settings(*job.config, env.world_size, env.rank, env.local_rank, env.local_world_size);
  // Before the rendezvous, so that no rank has allocated yet when another reads the available memory.
  check_data(*job.config);
  check_host_memory(*job.config, settings, env.world_size, env.local_world_size);
  check_plugins(job, settings, env.world_size, env.local_world_size);
  set_up_cpu_threads(settings, env);

  comm::Rendezvous rendezvous;
  rendezvous.rank = env.rank;
  rendezvous.world_size = env.world_size;
  rendezvous.master_addr = env.master_addr;
  rendezvous.master_port = env.master_port ? env.master_port : launch::pick_free_port();
  rendezvous.timeout_s = settings.comm_timeout_s;
  rendezvous.node = env.node;
  rendezvous.local_world_size = env.local_world_size_given ? env.local_world_size : 0;  // 0: not checked
  rendezvous.launcher = launch::describe_source(env.source);
  rendezvous.local_world_size_from = env.local_world_size_from;
  comm::CommOptions options;
  options.backend = settings.backend;
  options.timeout_s = settings.comm_timeout_s;
  options.cuda_over_gloo = settings.share_cuda_device;
  options.one_rank_groups_use_nccl = settings.nccl_single_rank;
  std::unique_ptr<comm::Comm> world = comm::Comm::create(rendezvous, options);
  auto collectives = std::make_unique<CollectivesAdapter>(*world, *job.services);
  collectives->set_topology(std::vector<int32_t>(world->node_of_rank().begin(), world->node_of_rank().end()));
  job.services->set_kv_store(std::make_shared<CommKvStore>(*world));
  job.services->set_default_timeout(std::chrono::milliseconds(static_cast<int64_t>(settings.comm_timeout_s * 1000)));

  int exit_code = 0;
  const std::string run_path = shared_run_path(settings, *world);
  std::unique_ptr<log::FileLog> file_log;
  if (env.rank == 0) {
    create_run_directory(run_path);  // its own error first: run.log's open would report only "No such file"
    file_log = std::make_unique<log::FileLog>(run_path + "/run.log", env.rank);
  }
  try {
    RunDirectory run_dir(run_path, job.config->to_toml(), env.rank == 0, env.rank);
    Observation observation(settings, run_path, env, *collectives, *job.services);
    // Copies between host memory and the device outlive the plugin instances: their destructors may still
    // complete copies in flight (a step that failed half way).
    DeviceCopies copies(training_device(settings), *job.services, settings.deferred_device_copies);
    copies.set_trace(observation.trace());
    PluginInstances instances(*job.services);
    instances.create_all(job.resolution, [&](const LoadedPlugin& p) { return job.plugin_config(p); });
    const PluginInstance* partition = instances.of_kind(ZHOST_KIND_PARTITION);
    ZHOST_ASSERT(partition != nullptr);
    TierInstallation tiers(job, instances, *job.services);
    TransformInstallation transform(instances, *collectives);

    StorageSwaps swaps(job, instances, *job.services, *world, run_dir.path(), settings.delayed_update_from,
                       settings.comm_timeout_s);

    Trainer trainer(settings, *world, *partition, run_dir, *job.services, observation.trace());
    trainer.set_storage_swaps(&swaps);
    trainer.set_transform(instances.of_kind(ZHOST_KIND_COLLECTIVE));
    if (env.rank == 0)
      spdlog::info(
          "training {} ({:.2f}M parameters) on {} rank(s), stage {} via '{}', {}; batch {} = micro {} x "
          "accumulation {} x world {}; run directory {}",
          settings.model.type, trainer.num_parameters() / 1e6, env.world_size, settings.zero_stage,
          partition->plugin->info.name, precision_name(settings.precision), settings.batch.train_batch_size,
          settings.batch.micro_batch_per_gpu, settings.batch.gradient_accumulation_steps, env.world_size,
          run_dir.path());
    TrainResult result = trainer.run();
    if (job.config->get_bool("run.save_final_weights")) trainer.save_weights(run_dir.path());
    spdlog::info("peak resident memory of this rank: {:.0f} MB", current_memory().peak_rss_mb);
    if (env.rank == 0)
      spdlog::info("done: {} steps applied, {} skipped, final loss {:.4f}", result.applied_steps, result.skipped_steps,
                   result.final_loss);
    observation.finish();
    copies.set_trace(nullptr);
  } catch (const c10::Error& e) {
    if (file_log) file_log->status("failed: LibTorch: " + first_line(e.what_without_backtrace()));
    throw;
  } catch (const std::exception& e) {
    if (file_log) file_log->status("failed: " + first_line(e.what()));
    throw;
  }
  world->barrier();
  if (file_log) file_log->status("completed");
  collectives.reset();
  job.services->set_kv_store(std::make_shared<LocalKvStore>());
  return exit_code;
}

}  // namespace

}  // namespace zhost::engine
