// host/engine/checkpointing.cpp: saving and loading checkpoints through the partition plugin's state calls.
#include "host/engine/checkpointing.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <mutex>

#include "host/checkpoint/checkpoint_dir.hpp"
#include "host/core/error.hpp"
#include "host/engine/rank_agreement.hpp"
#include "host/services/host_services.hpp"
#include "zhost/kit/dlpack_views.hpp"
#include "zhost/partition.h"

namespace zhost::engine {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// ---- the host's side of zhost_state_io ----------------------------------------------------------------------

struct SaveContext {
  checkpoint::ShardWriter* writer;          // synchronous save: straight to the file
  std::vector<SnapshotFragment>* snapshot;  // asynchronous save: copied into host memory
  const std::vector<checkpoint::ParamShape>& params;
  const std::vector<std::string>& states;
  uint64_t bytes = 0;
};

struct LoadContext {
  checkpoint::CheckpointReader& reader;
  const std::vector<checkpoint::ParamShape>& params;
};

// The fragment's values as a 1-D fp32 tensor view; refuses what the ABI does not allow.
at::Tensor fragment_values(const zhost_state_fragment* f, size_t num_params) {
  if (f == nullptr || !ZHOST_HAS_FIELD(f, zhost_state_fragment, data) || f->data == nullptr || f->state == nullptr)
    fail("a state fragment is incomplete (struct_size, state or data missing)");
  if (f->param_id >= num_params) fail("a state fragment names parameter {} of {}", f->param_id, num_params);
  at::Tensor values = kit::tensor_view(*f->data);
  if (values.dim() != 1 || values.scalar_type() != at::kFloat || !values.is_contiguous())
    fail("the state fragment of parameter {} is not a contiguous 1-D fp32 tensor", f->param_id);
  return values;
}

template <typename Body>
zhost_status* as_status(Body&& body) {
  try {
    body();
    return nullptr;
  } catch (const std::exception& e) {
    return HostServices::make_status(ZHOST_ERR_INTERNAL, e.what());
  }
}

zhost_status* put_fragment(void* user, const zhost_state_fragment* fragment) {
  return as_status([&] {
    auto& c = *static_cast<SaveContext*>(user);
    const at::Tensor values = fragment_values(fragment, c.params.size()).to(at::kCPU);
    const std::string state = fragment->state;
    if (std::find(c.states.begin(), c.states.end(), state) == c.states.end())
      fail("state '{}' is not one this job's optimizer keeps", state);
    const auto& param = c.params[fragment->param_id];
    if (fragment->offset < 0 || fragment->offset + values.numel() > param.numel())
      fail("a '{}' fragment of '{}' lies outside the parameter ([{}, {}) of {})", state, param.name, fragment->offset,
           fragment->offset + values.numel(), param.numel());
    if (values.numel() == 0) return;
    const float* data = values.data_ptr<float>();
    if (c.writer != nullptr)
      c.writer->write(fragment->param_id, state, fragment->offset, data, values.numel());
    else
      c.snapshot->push_back(
          {fragment->param_id, state, fragment->offset, std::vector<float>(data, data + values.numel())});
    c.bytes += static_cast<uint64_t>(values.numel()) * sizeof(float);
  });
}

zhost_status* get_fragment(void* user, zhost_state_fragment* fragment) {
  return as_status([&] {
    auto& c = *static_cast<LoadContext*>(user);
    const at::Tensor into = fragment_values(fragment, c.params.size());
    if (into.numel() == 0) return;
    const bool direct = into.device().is_cpu();
    at::Tensor host = direct ? into : at::empty({into.numel()}, at::kFloat);
    c.reader.read(c.params[fragment->param_id].name, fragment->state, fragment->offset, into.numel(),
                  host.data_ptr<float>());
    if (!direct) into.copy_(host);
  });
}

// ---- the RNG -------------------------------------------------------------------------------------------

std::string cpu_rng_state_hex() {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  at::Tensor state;
  {
    const std::lock_guard<std::mutex> lock(generator.mutex());
    state = generator.get_state();
  }
  const auto* bytes = state.data_ptr<uint8_t>();
  std::string hex;
  hex.reserve(static_cast<size_t>(state.numel()) * 2);
  for (int64_t i = 0; i < state.numel(); ++i) hex += fmt::format("{:02x}", bytes[i]);
  return hex;
}

void restore_cpu_rng_state(const std::string& hex, const std::string& file) {
  if (hex.size() % 2 != 0) fail_usage("checkpoint file '{}' has a malformed RNG state", file);
  at::Tensor state = at::empty({static_cast<int64_t>(hex.size() / 2)}, at::kByte);
  auto* bytes = state.data_ptr<uint8_t>();
  for (size_t i = 0; i < hex.size() / 2; ++i) {
    char* end = nullptr;
    const std::string two = hex.substr(2 * i, 2);
    bytes[i] = static_cast<uint8_t>(std::strtoul(two.c_str(), &end, 16));
    if (end != two.c_str() + 2) fail_usage("checkpoint file '{}' has a malformed RNG state", file);
  }
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  const std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

}  // namespace

namespace {

// Every rank throws when any rank failed the phase: its own error, or the first failing rank's.
void agree(comm::Comm& world, const std::string& error, const std::string& what) {
  const std::string failure = agreed_failure(world, error);
  if (!failure.empty()) fail("{}: {}", what, failure);
}

const zhost_partition_api& partition_api(const PluginInstance& partition) { return *partition.plugin->api->partition; }

}  // namespace

Checkpointer::Checkpointer(const CheckpointSettings& settings, comm::Comm& world, const PluginInstance& partition,
                           std::vector<checkpoint::ParamShape> params, std::vector<std::string> states, json job)
    : settings_(settings),
      world_(world),
      partition_(partition),
      params_(std::move(params)),
      states_(std::move(states)),
      job_(std::move(job)) {
  // A job that will save learns at start, not at its first save hours later, that its plugin cannot or that
  // checkpoint.dir cannot be written (every save, a signal's included, needs interval or at_end).
  const zhost_partition_api& api = partition_api(partition_);
  if (!settings_.interval && !settings_.at_end) return;
  if (api.save_state == nullptr)
    fail_usage(
        "partition plugin '{}' cannot save its state (its partition table has no save_state): drop "
        "checkpoint.interval and checkpoint.at_end, or use a plugin that saves",
        partition_.plugin->info.name);
  std::string error;
  if (world_.rank() == 0) error = capture_error([&] { checkpoint::check_writable(settings_.dir); });
  agree(world_, error, "checkpoint.dir cannot hold checkpoints");
}

// A job failing while an asynchronous save is written: the thread ends before the snapshot it reads; the staging
// folder stays unpublished (the next save removes it).
Checkpointer::~Checkpointer() {
  if (pending_ && pending_->writer.joinable()) pending_->writer.join();
}

bool Checkpointer::due(int64_t step, int64_t last_step) const {
  return (settings_.interval > 0 && step % settings_.interval == 0) || (settings_.at_end && step == last_step);
}

// A save in three phases (Note [Checkpoint atomicity]): rank 0 prepares the staging folder; every rank writes its
// shard (now, or with experimental.checkpoint_async from a snapshot on a thread while training goes on); rank 0
// publishes once every rank has written. Each phase ends with every rank agreeing on its outcome.
void Checkpointer::save(const TrainingPosition& position) {
  drain();  // one save in flight at a time
  const auto start = Clock::now();
  const std::string what = fmt::format("checkpoint of step {} not saved", position.step);
  std::string error;
  if (world_.rank() == 0) error = capture_error([&] { checkpoint::begin_staging(settings_.dir, position.step); });
  agree(world_, error, what);
  auto save = std::make_unique<PendingSave>();
  save->position = position;
  save->start = start;
  const std::string staging = checkpoint::staging_path(settings_.dir, position.step);
  if (!settings_.async) {
    save->error = capture_error([&] {
      checkpoint::ShardWriter writer(staging, world_.rank(), params_);
      save->bytes = collect_state(&writer, nullptr);
      writer.finish({{"rng_cpu", cpu_rng_state_hex()}});
    });
    complete(*save);
    return;
  }
  // The snapshot: the plugin's states copied into host memory now; the files written on a thread.
  save->error = capture_error([&] { save->bytes = collect_state(nullptr, &save->snapshot); });
  // A rank whose snapshot failed completes (and fails) the save now; the others must too, or their next
  // collectives would not match theirs.
  at::Tensor failed = at::tensor({save->error.empty() ? int64_t{0} : int64_t{1}}, at::kLong);
  world_.all_reduce(failed, comm::ReduceOp::kMax);
  if (failed.item<int64_t>() != 0) {
    complete(*save);
    return;
  }
  save->snapshot_s = std::chrono::duration<double>(Clock::now() - start).count();
  const json host = {{"rng_cpu", cpu_rng_state_hex()}};
  PendingSave* raw = save.get();
  save->writer = std::thread([this, raw, staging, host] {
    raw->error = capture_error([&] {
      checkpoint::ShardWriter writer(staging, world_.rank(), params_);
      for (const SnapshotFragment& f : raw->snapshot)
        writer.write(f.param, f.state, f.offset, f.values.data(), static_cast<int64_t>(f.values.size()));
      writer.finish(host);
    });
    raw->snapshot.clear();
    raw->snapshot.shrink_to_fit();
    raw->written.store(true);
  });
  pending_ = std::move(save);
}

uint64_t Checkpointer::collect_state(checkpoint::ShardWriter* writer, std::vector<SnapshotFragment>* snapshot) {
  const zhost_partition_api& api = partition_api(partition_);  // save_state checked at construction
  SaveContext context{writer, snapshot, params_, states_};
  zhost_state_io io{sizeof(io), nullptr, &context, put_fragment, get_fragment};
  HostServices::throw_if_error(api.save_state(partition_.instance, &io),
                               fmt::format("partition plugin '{}' save_state", partition_.plugin->info.name));
  return context.bytes;
}

void Checkpointer::progress() {
  if (!pending_) return;
  at::Tensor unwritten = at::tensor({pending_->written.load() ? int64_t{0} : int64_t{1}}, at::kLong);
  world_.all_reduce(unwritten);
  if (unwritten.item<int64_t>() == 0) drain();
}

void Checkpointer::drain() {
  if (!pending_) return;
  std::unique_ptr<PendingSave> save = std::move(pending_);
  if (save->writer.joinable()) save->writer.join();
  complete(*save);
}

void Checkpointer::complete(PendingSave& save) {
  const int rank = world_.rank();
  const std::string& root = settings_.dir;
  const TrainingPosition& position = save.position;
  const std::string what = fmt::format("checkpoint of step {} not saved", position.step);
  if (!save.error.empty()) spdlog::error("{}: {}", what, save.error);
  try {
    agree(world_, save.error, what);
  } catch (const Error&) {
    if (rank == 0) checkpoint::discard_staging(root, position.step);
    throw;
  }
  std::string published, error;
  if (rank == 0) {
    error = capture_error([&] {
      json params = json::array();
      for (const auto& p : params_) params.push_back({{"name", p.name}, {"shape", p.shape}});
      const json meta = {{"format", checkpoint::kFormatName},
                         {"version", checkpoint::kFormatVersion},
                         {"world_size", world_.world_size()},
                         {"params", params},
                         {"states", states_},
                         {"host",
                          {{"step", position.step},
                           {"applied_steps", position.applied_steps},
                           {"skipped_steps", position.skipped_steps},
                           {"loss_scaler",
                            {{"scale", position.scaler.scale},
                             {"iteration", position.scaler.iteration},
                             {"last_overflow_iteration", position.scaler.last_overflow_iteration},
                             {"hysteresis_left", position.scaler.hysteresis_left}}}}},
                         {"job", job_}};
      checkpoint::write_checkpoint_json(checkpoint::staging_path(root, position.step), meta);
      published = checkpoint::publish(root, position.step);
      checkpoint::prune(root, settings_.keep_last);
    });
    if (!error.empty()) checkpoint::discard_staging(root, position.step);
  }
  agree(world_, error, what);
  at::Tensor total = at::tensor({static_cast<int64_t>(save.bytes)}, at::kLong);
  world_.all_reduce(total);
  const double seconds = std::chrono::duration<double>(Clock::now() - save.start).count();
  const double mb = static_cast<double>(total.item<int64_t>()) / 1e6;
  if (rank != 0) return;
  if (settings_.async)
    spdlog::info(
        "checkpoint of step {} saved to {}: {:.1f} MB, {:.2f} s of training for the snapshot, {:.2f} s until "
        "published",
        position.step, published, mb, save.snapshot_s, seconds);
  else
    spdlog::info("checkpoint of step {} saved to {}: {:.1f} MB in {:.2f} s ({:.0f} MB/s)", position.step, published, mb,
                 seconds, mb / std::max(seconds, 1e-9));
}

namespace {

// The checkpoint must hold this job's model and optimizer; world size, stage and precision may differ.
void check_compatible(const checkpoint::CheckpointReader& reader, const std::vector<checkpoint::ParamShape>& params,
                      const std::vector<std::string>& states, const json& job) {
  const std::string& dir = reader.dir();
  if (reader.params().size() != params.size())
    fail_usage("checkpoint '{}' holds {} parameters, this job's model has {}: it was saved from another model", dir,
               reader.params().size(), params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& saved = reader.params()[i];
    if (saved.name != params[i].name || saved.shape != params[i].shape)
      fail_usage(
          "checkpoint '{}' has parameter {} as '{}' {}, this job's model has '{}' {}: it was saved from another "
          "model",
          dir, i, saved.name, json(saved.shape).dump(), params[i].name, json(params[i].shape).dump());
  }
  const json saved_job = reader.meta().value("job", json::object());
  const std::string saved_optimizer = saved_job.value("optimizer", ""), optimizer = job.value("optimizer", "");
  for (const std::string& state : states)
    if (std::find(reader.states().begin(), reader.states().end(), state) == reader.states().end())
      fail_usage(
          "checkpoint '{}' was saved with optimizer {} and has no '{}' state, which this job's {} needs; resume "
          "with optimizer.type as saved",
          dir, saved_optimizer, state, optimizer);
  if (saved_optimizer != optimizer)
    fail_usage("checkpoint '{}' was saved with optimizer {}, this job uses {}; resume with optimizer.type as saved",
               dir, saved_optimizer, optimizer);
}

}  // namespace

TrainingPosition Checkpointer::load() {
  const auto start = Clock::now();
  const std::string dir = checkpoint::resolve_checkpoint(settings_.resume, settings_.dir);
  checkpoint::CheckpointReader reader(dir);
  check_compatible(reader, params_, states_, job_);
  const zhost_partition_api& api = partition_api(partition_);
  if (api.load_state == nullptr)
    fail_usage(
        "partition plugin '{}' cannot load a checkpoint (its partition table has no load_state): resume with a "
        "plugin that loads",
        partition_.plugin->info.name);
  // The ranks check the data files between them first, so that no rank fails half way through the plugin's
  // collectives while the others wait.
  const std::string what = fmt::format("cannot resume from '{}'", dir);
  std::string error = capture_error([&] {
    for (int r = world_.rank(); r < reader.world_size(); r += world_.world_size()) reader.verify_rank_file(r);
  });
  agree(world_, error, what);
  LoadContext context{reader, params_};
  zhost_state_io io{sizeof(io), nullptr, &context, put_fragment, get_fragment};
  HostServices::throw_if_error(api.load_state(partition_.instance, &io),
                               fmt::format("partition plugin '{}' load_state", partition_.plugin->info.name));
  const json& host = reader.meta().at("host");
  const std::string meta_file = dir + "/checkpoint.json";
  auto number = [&](const json& object, const char* key) {
    if (!object.contains(key) || !object.at(key).is_number())
      fail_usage("checkpoint file '{}' has no \"host.{}\": the checkpoint is damaged", meta_file, key);
    return object.at(key);
  };
  TrainingPosition position;
  position.step = number(host, "step").get<int64_t>();
  position.applied_steps = number(host, "applied_steps").get<int64_t>();
  position.skipped_steps = number(host, "skipped_steps").get<int64_t>();
  position.precision = reader.meta().value("job", json::object()).value("precision", "");
  const json scaler = host.value("loss_scaler", json::object());
  position.scaler.scale = number(scaler, "scale").get<double>();
  position.scaler.iteration = number(scaler, "iteration").get<int64_t>();
  position.scaler.last_overflow_iteration = number(scaler, "last_overflow_iteration").get<int64_t>();
  position.scaler.hysteresis_left = number(scaler, "hysteresis_left").get<int64_t>();
  // A rank beyond the saving world keeps its own RNG: there is no state of it to restore.
  if (world_.rank() < reader.world_size()) {
    const json& rank_host = reader.rank_host(world_.rank());
    if (rank_host.contains("rng_cpu") && rank_host.at("rng_cpu").is_string())
      restore_cpu_rng_state(rank_host.at("rng_cpu").get<std::string>(), dir);
  }
  const json saved_job = reader.meta().value("job", json::object());
  if (world_.rank() == 0)
    spdlog::info(
        "resumed from {} after step {} ({} applied): saved by {} rank(s) via '{}', loaded on {} via '{}' in "
        "{:.2f} s",
        dir, position.step, position.applied_steps, reader.world_size(), saved_job.value("partition_plugin", "?"),
        world_.world_size(), partition_.plugin->info.name, std::chrono::duration<double>(Clock::now() - start).count());
  return position;
}

}  // namespace zhost::engine
