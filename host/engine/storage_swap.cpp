// host/engine/storage_swap.cpp: Note [Storage swap]: the host's side of moving the optimizer's states between
// storages while a job runs, and the control requests that ask for it.
#include "host/engine/storage_swap.hpp"

#include <spdlog/spdlog.h>

#include <chrono>
#include <fstream>

#include "host/config/document.hpp"
#include "host/config/validate.hpp"
#include "host/core/error.hpp"
#include "host/engine/rank_agreement.hpp"
#include "zhost/offload.h"

namespace zhost::engine {
namespace {

using json = nlohmann::json;

// One phase of the computing tier's optimizer_move_storage; throws the tier's error.
uint64_t move_storage(const PluginInstance& compute, zhost_storage_move_phase phase, const zhost_tier_ref* storage) {
  zhost_tier_storage_move args{};
  args.struct_size = sizeof(args);
  args.phase = phase;
  args.storage = storage;
  HostServices::throw_if_error(compute.plugin->api->offload->optimizer_move_storage(compute.instance, &args),
                               fmt::format("tier '{}' moving its optimizer states", compute.plugin->info.name));
  return args.bytes;
}

// The storage name a config starts with: "nvme" (device = "nvme"), zero.offload_optimizer.storage, or "cpu".
std::string initial_storage(const config::ResolvedConfig& config) {
  if (config.get_string("zero.offload_optimizer.device") == "nvme") return "nvme";
  const std::string storage = config.get_string("zero.offload_optimizer.storage");
  return storage == "none" ? "cpu" : storage;
}

}  // namespace

StorageSwaps::StorageSwaps(const JobSetup& job, PluginInstances& instances, HostServices& services, comm::Comm& world,
                           const std::string& run_path, bool delayed_update, double store_timeout_s)
    : job_(job),
      instances_(instances),
      services_(services),
      world_(world),
      run_path_(run_path),
      delayed_update_(delayed_update),
      store_timeout_s_(store_timeout_s),
      schedule_(config::storage_swap_schedule(*job.config)) {
  auto role_instance = [&](zhost_tier_role role) -> const PluginInstance* {
    auto tier = job.resolution.tiers.find(role);
    if (tier == job.resolution.tiers.end()) return nullptr;
    for (const auto& live : instances.all())
      if (live.plugin == tier->second && (live.tier_role == 0 || live.tier_role == static_cast<uint32_t>(role)))
        return &live;
    return nullptr;
  };
  compute_ = role_instance(ZHOST_TIER_FOR_OPTIMIZER);
  stored_in_ = role_instance(ZHOST_TIER_FOR_OPTIMIZER_STORAGE);
  if (compute_) storage_ = initial_storage(*job.config);
  if (world.rank() == 0) channel_ = std::make_unique<control::ControlChannel>(run_path);
}

StorageSwaps::~StorageSwaps() {
  if (compute_) services_.set_tier(ZHOST_TIER_FOR_OPTIMIZER_STORAGE, std::nullopt);
}

void StorageSwaps::after_step(int64_t step, int64_t request) {
  for (const config::StorageSwapPoint& point : schedule_)
    if (point.after_step == step) swap(step, point.storage, "schedule");
  if (request != 0) serve_request(step, request);
}

// Rank 0 reads the request and hands its text to every rank through the store; every rank then decides alike.
void StorageSwaps::serve_request(int64_t step, int64_t request) {
  const std::string key = fmt::format("zhost/control/{}", request);
  std::string text;
  if (world_.rank() == 0) {
    const std::optional<json> command = channel_->read(request);
    text = command ? command->dump() : std::string();
    world_.store_set(key, std::vector<uint8_t>(text.begin(), text.end()));
  } else {
    const std::optional<std::vector<uint8_t>> value = world_.store_get(key, store_timeout_s_);
    if (!value) fail("rank 0 did not publish control command {} in time (comm.timeout_s)", request);
    text.assign(value->begin(), value->end());
  }
  const json command = text.empty() ? json() : json::parse(text, nullptr, false);
  std::string refusal;
  if (!command.is_object())
    refusal = "the request is not a JSON object; send commands with `zhost control`";
  else if (command.value("command", std::string()) != "swap")
    refusal = fmt::format("unknown command '{}'; this job understands: swap", command.value("command", std::string()));
  else if (!command.contains("optimizer") || !command["optimizer"].is_string() ||
           command["optimizer"].get<std::string>().empty())
    refusal = "a swap names the storage to move the optimizer's states into: --optimizer cpu|nvme|NAME";
  else if (!compute_)
    refusal =
        "this job has no tier running the optimizer (zero.offload_optimizer.device = \"none\"), so there is no "
        "storage to swap; start it with zero.offload_optimizer.device = \"cpu\"";
  if (!refusal.empty()) {
    if (channel_) channel_->refuse(request, refusal);
    if (world_.rank() == 0) spdlog::warn("control command {} refused: {}", request, refusal);
    return;
  }
  if (channel_) channel_->acknowledge(request, step);
  const std::string from = storage_, to = command["optimizer"].get<std::string>();
  const Outcome outcome = swap(step, to, fmt::format("control {}", request));
  if (!channel_) return;
  json result{{"ok", outcome.ok}, {"after_step", step}, {"from", from}, {"to", to}};
  if (outcome.ok) {
    result["bytes"] = outcome.bytes;
    result["seconds"] = outcome.seconds;
  } else {
    result["error"] = outcome.error;
  }
  channel_->answer(request, result);
}

const LoadedPlugin* StorageSwaps::find_storage(const std::string& name) {
  const std::string why = fmt::format("storage '{}'", name);
  if (name == "cpu" || name == "none") return nullptr;
  for (const auto& plugin : job_.discovery.plugins)
    for (const auto& capability : plugin.info.provides)
      if (capability == "offload:" + name) return storage_swap_target(name, job_.discovery.plugins, why);
  for (const Discovery& later : found_later_)
    for (const auto& plugin : later.plugins)
      for (const auto& capability : plugin.info.provides)
        if (capability == "offload:" + name) return storage_swap_target(name, later.plugins, why);
  // Not found at start: look again (a tier built or copied there while the job runs).
  Discovery discovery = discover_plugins(job_.discovery.searched, PluginLoader(services_));
  for (const std::string& failure : discovery.failures)
    if (failure.find("offload") != std::string::npos || failure.find(name) != std::string::npos)
      fail_usage("{}: {}", why, failure);
  found_later_.push_back(std::move(discovery));
  return storage_swap_target(name, found_later_.back().plugins, why);
}

// The values of the plugin's keys: the job's config validated again with the plugin's keys declared, so that
// a plugin found only now gets its defaults and a key it requires but the config lacks is refused (for a tier
// found at start, whose keys the job accepted then, this gives the same values).
std::map<std::string, ConfigValue> StorageSwaps::config_for(const LoadedPlugin& plugin) const {
  config::Schema schema = job_.schema;
  add_plugin_keys(schema, plugin);
  const config::ResolvedConfig config =
      config::validate(config::Document::parse(job_.config->to_toml(), "the job's config"), schema);
  return plugin_config_values(config, plugin);
}

StorageSwaps::Outcome StorageSwaps::swap(int64_t step, const std::string& to, const std::string& origin) {
  const auto start = std::chrono::steady_clock::now();
  const std::string from = storage_;
  Outcome outcome;
  const PluginInstance* created = nullptr;
  bool copying = false;
  zhost_tier_ref ref{};
  ref.struct_size = sizeof(ref);
  std::string error = capture_error([&] {
    if (!compute_) fail_usage("this job has no tier running the optimizer (zero.offload_optimizer.device = \"none\")");
    if (delayed_update_)
      fail_usage(
          "this job runs zero.offload_optimizer.delayed_update, whose optimizer step is still running at the step "
          "boundary; a storage swap needs the tier idle");
    if (!can_move_storage(*compute_->plugin))
      fail_usage("plugin '{}' runs the optimizer but cannot move its states (no optimizer_move_storage, ABI 0.7)",
                 compute_->plugin->info.name);
    const LoadedPlugin* plugin = find_storage(to);
    if (plugin == compute_->plugin) fail_usage("plugin '{}' cannot store the states it steps itself; name \"cpu\"", to);
    if (plugin) {
      created = &instances_.create_one({plugin, ZHOST_TIER_FOR_OPTIMIZER_STORAGE}, config_for(*plugin), *compute_);
      ref.instance = created->instance;
      ref.api = plugin->api->offload;
      ref.name = plugin->info.name.c_str();
    }
    copying = true;
    outcome.bytes = move_storage(*compute_, ZHOST_STORAGE_MOVE_COPY, &ref);
  });
  const std::string failure = agreed_failure(world_, error);
  if (failure.empty()) {
    move_storage(*compute_, ZHOST_STORAGE_MOVE_COMMIT, nullptr);
    if (created)
      services_.set_tier(ZHOST_TIER_FOR_OPTIMIZER_STORAGE,
                         TierRef{created->instance, created->plugin->api->offload, created->plugin->info.name});
    else
      services_.set_tier(ZHOST_TIER_FOR_OPTIMIZER_STORAGE, std::nullopt);
    if (stored_in_) instances_.destroy_one(*stored_in_);
    stored_in_ = created;
    storage_ = to;
    outcome.ok = true;
  } else {
    if (copying) move_storage(*compute_, ZHOST_STORAGE_MOVE_ABORT, nullptr);
    if (created) instances_.destroy_one(*created);
    outcome.error = failure;
  }
  outcome.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (world_.rank() == 0) {
    json line{{"after_step", step}, {"origin", origin}, {"from", from},
              {"to", to},           {"ok", outcome.ok}, {"seconds", outcome.seconds}};
    if (outcome.ok)
      line["bytes"] = outcome.bytes;
    else
      line["error"] = outcome.error;
    std::ofstream(run_path_ + "/swaps.jsonl", std::ios::app) << line.dump() << "\n";
    if (outcome.ok)
      spdlog::info("optimizer states moved from '{}' to '{}' after step {} ({}): {:.1f} MB in {:.2f} s", from, to, step,
                   origin, static_cast<double>(outcome.bytes) / 1e6, outcome.seconds);
    else
      spdlog::warn("optimizer states not moved to '{}' after step {} ({}): {}; training goes on with them in '{}'", to,
                   step, origin, outcome.error, from);
  }
  return outcome;
}

}  // namespace zhost::engine
