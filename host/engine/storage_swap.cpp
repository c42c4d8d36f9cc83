// host/engine/storage_swap.cpp: Note [Storage swap]: the host's side of moving the optimizer's states between
// storages while a job runs, and the control requests that ask for it.
#include "host/engine/storage_swap.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <fstream>

#include "host/config/document/document.hpp"
#include "host/config/schema/validate.hpp"
#include "host/core/error.hpp"
#include "host/engine/rank_agreement.hpp"
#include "zhost/partition.h"
#include "zhost/zhost.h"

namespace zhost::engine {
namespace {

using json = nlohmann::json;

}  // namespace

StorageSwaps::StorageSwaps(const JobSetup& job, PluginInstances& instances, HostServices& services, comm::Comm& world,
                           const std::string& run_path, int64_t delayed_from, double store_timeout_s)
    : job_(job),
      instances_(instances),
      services_(services),
      world_(world),
      run_path_(run_path),
      delayed_from_(delayed_from),
      last_step_(job.config->get_int("steps")),
      store_timeout_s_(store_timeout_s) {
  auto role_instance = [&](zhost_tier_role role) -> const PluginInstance* {
    auto tier = job.resolution.tiers.find(role);
    if (tier == job.resolution.tiers.end()) return nullptr;
    for (const auto& live : instances.all())
      if (live.plugin == tier->second && (live.tier_role == 0 || live.tier_role == static_cast<uint32_t>(role)))
        return &live;
    return nullptr;
  };
  partition_ = instances.of_kind(ZHOST_KIND_PARTITION);
  compute_ = role_instance(ZHOST_TIER_FOR_OPTIMIZER);
  optimizer_.stored_in = role_instance(ZHOST_TIER_FOR_OPTIMIZER_STORAGE);
  if (compute_) optimizer_.storage = config::initial_swap_storage(*job.config, "zero.offload_optimizer.swap_schedule");
  optimizer_.schedule = config::storage_swap_schedule(*job.config, "zero.offload_optimizer.swap_schedule");
  params_.stored_in = role_instance(ZHOST_TIER_FOR_PARAMS);
  if (params_.stored_in) params_.storage = job.config->get_string("zero.offload_param.device");
  params_.schedule = config::storage_swap_schedule(*job.config, "zero.offload_param.swap_schedule");
  if (world.rank() == 0) channel_ = std::make_unique<control::ControlChannel>(run_path);
}

StorageSwaps::~StorageSwaps() {
  if (compute_) services_.set_tier(ZHOST_TIER_FOR_OPTIMIZER_STORAGE, std::nullopt);
  if (params_.stored_in) services_.set_tier(ZHOST_TIER_FOR_PARAMS, std::nullopt);
}

bool StorageSwaps::scheduled_after(int64_t step) const {
  for (const Role* role : {&optimizer_, &params_})
    for (const config::StorageSwapPoint& point : role->schedule)
      if (point.after_step == step) return true;
  return false;
}

bool StorageSwaps::drains_after(int64_t step) const {
  return delayed_from_ > 0 && (drain_next_ || scheduled_after(step));
}

bool StorageSwaps::tiers_idle_after(int64_t step) const {
  return delayed_from_ == 0 || step < delayed_from_ || step == last_step_ || drains_after(step);
}

void StorageSwaps::after_step(int64_t step, int64_t request) {
  const bool idle = tiers_idle_after(step);
  drain_next_ = false;
  for (Role* role : {&optimizer_, &params_})
    for (const config::StorageSwapPoint& point : role->schedule)
      if (point.after_step == step) swap(*role, step, point.storage, "schedule");
  if (request == 0) return;
  if (idle)
    serve_request(step, request);
  else
    drain_next_ = true;  // the request stays waiting on rank 0, and comes back after the next step
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
  auto names = [&](const char* field) {
    return command.is_object() && command.contains(field) && command[field].is_string() &&
           !command[field].get<std::string>().empty();
  };
  std::string refusal;
  if (!command.is_object())
    refusal = "the request is not a JSON object; send commands with `zhost control`";
  else if (command.value("command", std::string()) != "swap")
    refusal = fmt::format("unknown command '{}'; this job understands: swap", command.value("command", std::string()));
  else if (names("optimizer") == names("param"))
    refusal =
        "a swap names one storage: --optimizer cpu|nvme|NAME (the optimizer's states) or --param NAME "
        "(stage 3's parameter shards)";
  else if (names("optimizer") && !compute_)
    refusal =
        "this job has no tier running the optimizer (zero.offload_optimizer.device = \"none\"), so there is no "
        "storage to swap; start it with zero.offload_optimizer.device = \"cpu\"";
  else if (names("param") && !params_.stored_in)
    refusal =
        "this job keeps no parameter shards in a tier (zero.offload_param.device = \"none\"); start it at stage 3 "
        "with zero.offload_param.device = \"cpu\" to swap them";
  if (!refusal.empty()) {
    if (channel_) channel_->refuse(request, refusal);
    if (world_.rank() == 0) spdlog::warn("control command {} refused: {}", request, refusal);
    return;
  }
  if (channel_) channel_->acknowledge(request, step);
  Role& role = names("optimizer") ? optimizer_ : params_;
  const std::string from = role.storage, to = command[role.name].get<std::string>();
  const Outcome outcome = swap(role, step, to, fmt::format("control {}", request));
  if (!channel_) return;
  json result{{"ok", outcome.ok}, {"role", role.name}, {"after_step", step}, {"from", from}, {"to", to}};
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
  auto provides = [&](const std::vector<LoadedPlugin>& plugins) {
    return std::any_of(plugins.begin(), plugins.end(), [&](const LoadedPlugin& plugin) {
      return std::count(plugin.info.provides.begin(), plugin.info.provides.end(), "offload:" + name) > 0;
    });
  };
  if (provides(job_.discovery.plugins)) return storage_swap_target(name, job_.discovery.plugins, why);
  for (const Discovery& later : found_later_)
    if (provides(later.plugins)) return storage_swap_target(name, later.plugins, why);
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
  add_read_keys(schema, plugin, job_.discovery.plugins);
  const config::ResolvedConfig config =
      config::validate(config::Document::parse(job_.config->to_toml(), "the job's config"), schema);
  return plugin_config_values(config, plugin);
}

const PluginInstance* StorageSwaps::storage_instance(const Role& role, const LoadedPlugin* plugin, bool* created) {
  *created = false;
  if (role.role == ZHOST_TIER_FOR_OPTIMIZER_STORAGE) {
    if (!plugin) return nullptr;  // "cpu": the computing tier's own memory
    if (plugin == compute_->plugin)
      fail_usage("plugin '{}' cannot store the states it steps itself; name \"cpu\"", plugin->info.name);
  } else {
    if (!plugin) {  // "cpu": the CPU tier's buffers, served by the computing tier's instance
      if (!compute_ || std::count(compute_->plugin->info.provides.begin(), compute_->plugin->info.provides.end(),
                                  "offload:cpu") == 0)
        fail_usage("storage 'cpu' for parameter shards is the CPU tier, and this job runs none");
      return compute_;
    }
    if (plugin == compute_->plugin) return compute_;
  }
  // The new instance goes before the first user of the role, so that it is destroyed after it.
  const PluginInstance& before = role.role == ZHOST_TIER_FOR_PARAMS ? *partition_ : *compute_;
  *created = true;
  return &instances_.create_one({plugin, static_cast<uint32_t>(role.role)}, config_for(*plugin), before);
}

void StorageSwaps::check_movable(const Role& role) const {
  if (role.role == ZHOST_TIER_FOR_OPTIMIZER_STORAGE) {
    if (!compute_) fail_usage("this job has no tier running the optimizer (zero.offload_optimizer.device = \"none\")");
    if (!can_move_storage(*compute_->plugin))
      fail_usage("plugin '{}' runs the optimizer but cannot move its states (no move_storage in its optimizer table)",
                 compute_->plugin->info.name);
    return;
  }
  if (!role.stored_in)
    fail_usage("this job keeps no parameter shards in a tier (zero.offload_param.device = \"none\")");
  if (!can_move_param_storage(*partition_->plugin))
    fail_usage("partition plugin '{}' cannot move its parameter shards (no move_param_storage)",
               partition_->plugin->info.name);
}

uint64_t StorageSwaps::move(const Role& role, zhost_storage_move_phase phase, const zhost_tier_ref* storage) {
  zhost_tier_storage_move args{};
  args.struct_size = sizeof(args);
  args.phase = phase;
  args.storage = storage;
  if (role.role == ZHOST_TIER_FOR_OPTIMIZER_STORAGE) {
    HostServices::throw_if_error(compute_->plugin->api->optimizer->move_storage(compute_->instance, &args),
                                 fmt::format("tier '{}' moving the optimizer's states", compute_->plugin->info.name));
  } else {
    const zhost_partition_api* table = partition_->plugin->api->partition;
    HostServices::throw_if_error(table->move_param_storage(partition_->instance, &args),
                                 fmt::format("plugin '{}' moving the parameter shards", partition_->plugin->info.name));
  }
  return args.bytes;
}

StorageSwaps::Outcome StorageSwaps::swap(Role& role, int64_t step, const std::string& to, const std::string& origin) {
  const auto start = std::chrono::steady_clock::now();
  const std::string from = role.storage;
  Outcome outcome;
  const PluginInstance* target = nullptr;
  bool created = false, copying = false;
  zhost_tier_ref ref{};
  ref.struct_size = sizeof(ref);
  std::string error = capture_error([&] {
    check_movable(role);  // before anything is created, so that ABORT finds a tier that can take it
    if (role.role == ZHOST_TIER_FOR_PARAMS && to == "none")
      fail_usage("stage 3 keeps offloaded parameter shards in a tier for the whole job; name one: cpu, nvme or NAME");
    // A move onto itself would copy the data onto itself and then drop it.
    if ((to == "none" ? "cpu" : to) == from)
      fail_usage("the {} are kept in '{}' already; name another storage",
                 role.role == ZHOST_TIER_FOR_PARAMS ? "parameter shards" : "optimizer's states", from);
    target = storage_instance(role, find_storage(to), &created);
    if (target) {
      ref.instance = target->instance;
      ref.role = role.role;
      ref.storage = target->plugin->api->storage;
      ref.optimizer = target->plugin->api->optimizer;
      ref.name = target->plugin->info.name.c_str();
    }
    copying = true;
    outcome.bytes = move(role, ZHOST_STORAGE_MOVE_COPY, &ref);
  });
  const std::string failure = agreed_failure(world_, error);
  if (failure.empty()) {
    move(role, ZHOST_STORAGE_MOVE_COMMIT, nullptr);
    if (target)
      services_.set_tier(role.role, TierRef{target->instance, target->plugin->api, target->plugin->info.name});
    else
      services_.set_tier(role.role, std::nullopt);
    // The old storage goes unless another role still uses it (the CPU tier stores parameter shards and steps).
    const PluginInstance* old = role.stored_in;
    Role& other = &role == &optimizer_ ? params_ : optimizer_;
    if (old && old != compute_ && old != other.stored_in && old != target) instances_.destroy_one(*old);
    role.stored_in = target;
    role.storage = to;
    outcome.ok = true;
  } else {
    if (copying) move(role, ZHOST_STORAGE_MOVE_ABORT, nullptr);
    if (created) instances_.destroy_one(*target);
    outcome.error = failure;
  }
  outcome.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (world_.rank() == 0) {
    json line{{"role", role.name}, {"after_step", step}, {"origin", origin},          {"from", from},
              {"to", to},          {"ok", outcome.ok},   {"seconds", outcome.seconds}};
    if (outcome.ok)
      line["bytes"] = outcome.bytes;
    else
      line["error"] = outcome.error;
    std::ofstream(run_path_ + "/swaps.jsonl", std::ios::app) << line.dump() << "\n";
    const char* what = role.role == ZHOST_TIER_FOR_PARAMS ? "parameter shards" : "optimizer states";
    if (outcome.ok)
      spdlog::info("{} moved from '{}' to '{}' after step {} ({}): {:.1f} MB in {:.2f} s", what, from, to, step, origin,
                   static_cast<double>(outcome.bytes) / 1e6, outcome.seconds);
    else
      spdlog::warn("{} not moved to '{}' after step {} ({}): {}; training goes on with them in '{}'", what, to, step,
                   origin, outcome.error, from);
  }
  return outcome;
}

}  // namespace zhost::engine
