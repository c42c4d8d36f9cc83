// tests/fuzz/fuzz_descriptor.cpp: libFuzzer target for the plugin descriptor reader: the input becomes a
// plugin's descriptor (names, capabilities, config keys with types, defaults, ranges and choices), which
// the host negotiates as it does a plugin file's, then adds the plugin's keys to the schema next to the
// host's and validates an empty config against it, as `zhost config check` does.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "host/config/schema/host_schema.hpp"
#include "host/config/schema/validate.hpp"
#include "host/job/job_setup.hpp"
#include "host/plugins/loader.hpp"
#include "tests/fuzz/fuzz_support.hpp"
#include "zhost/collective.h"
#include "zhost/partition.h"
#include "zhost/zhost.h"

namespace {

// A NULL-terminated list of strings that stay alive as long as this does.
struct StringList {
  std::deque<std::string> items;
  std::vector<const char*> pointers;
  const char* const* take(FuzzedDataProvider& input, bool may_be_null) {
    if (may_be_null && input.ConsumeBool()) return nullptr;
    const size_t count = input.ConsumeIntegralInRange<size_t>(0, 4);
    for (size_t i = 0; i < count; ++i) items.push_back(input.ConsumeRandomLengthString(40));
    for (const auto& item : items) pointers.push_back(item.c_str());
    pointers.push_back(nullptr);
    return pointers.data();
  }
};

struct FuzzedDescriptor {
  std::deque<std::string> strings;
  std::deque<StringList> lists;
  std::vector<zhost_config_key> keys;
  zhost_plugin_descriptor descriptor{};

  const char* string(FuzzedDataProvider& input, size_t max_length) {
    if (input.ConsumeIntegralInRange<int>(0, 15) == 0) return nullptr;
    strings.push_back(input.ConsumeRandomLengthString(max_length));
    return strings.back().c_str();
  }
  const char* const* list(FuzzedDataProvider& input, bool may_be_null) {
    lists.emplace_back();
    return lists.back().take(input, may_be_null);
  }

  explicit FuzzedDescriptor(FuzzedDataProvider& input) {
    descriptor.struct_size = input.ConsumeBool() ? sizeof(descriptor) : input.ConsumeIntegralInRange<size_t>(0, 128);
    descriptor.name = string(input, 20);
    descriptor.version = string(input, 10);
    descriptor.summary = string(input, 40);
    descriptor.kind = static_cast<zhost_capability_kind>(input.ConsumeIntegralInRange<int>(-1, 4));
    descriptor.provides = list(input, true);
    descriptor.requires_caps = list(input, true);
    descriptor.conflicts = list(input, true);
    const size_t count = input.ConsumeIntegralInRange<size_t>(0, 6);
    for (size_t i = 0; i < count; ++i) {
      zhost_config_key key{};
      key.struct_size = input.ConsumeBool() ? sizeof(key) : input.ConsumeIntegralInRange<size_t>(0, 96);
      key.key = string(input, 40);
      key.type = static_cast<zhost_config_type>(input.ConsumeIntegralInRange<int>(-1, 5));
      key.default_value = string(input, 40);
      key.doc = string(input, 40);
      key.min_value = input.ConsumeFloatingPoint<double>();
      key.max_value = input.ConsumeFloatingPoint<double>();
      key.has_range = input.ConsumeBool();
      key.choices = list(input, true);
      keys.push_back(key);
    }
    descriptor.config_keys = keys.empty() || input.ConsumeIntegralInRange<int>(0, 15) == 0 ? nullptr : keys.data();
    descriptor.num_config_keys = keys.size();
    descriptor.flags = input.ConsumeIntegral<uint64_t>();
  }
};

const FuzzedDescriptor* current = nullptr;

zhost_status* create(zhost_plugin_create_args*) { return nullptr; }
void destroy(zhost_plugin_instance*) {}
// Every kind's table, empty: the loader reads only their struct_size before create, which is never called here.
template <typename Table>
const Table* empty_table() {
  static Table table = [] {
    Table t{};
    t.struct_size = sizeof(t);
    return t;
  }();
  return &table;
}

zhost_status* entry(zhost_negotiation* io) {
  static zhost_plugin_api api{};
  api.struct_size = sizeof(api);
  api.create = create;
  api.destroy = destroy;
  api.partition = empty_table<zhost_partition_api>();
  api.storage = empty_table<zhost_storage_api>();
  api.optimizer = empty_table<zhost_optimizer_tier_api>();
  api.collective = empty_table<zhost_collective_api>();
  io->plugin_abi_minor = ZHOST_ABI_MINOR;
  io->plugin_min_host_minor = 0;
  io->descriptor = &current->descriptor;
  io->api = &api;
  return nullptr;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static zhost::HostServices services;
  FuzzedDataProvider input(data, size);
  FuzzedDescriptor descriptor(input);
  current = &descriptor;
  zhost::fuzz::refuse_only_with_zhost_errors([&] {
    zhost::LoadedPlugin plugin = zhost::PluginLoader(services).load_builtin({"fuzz", entry});
    zhost::config::Schema schema;
    zhost::config::add_host_keys(schema);
    zhost::add_plugin_keys(schema, plugin, /*relax_required=*/input.ConsumeBool());
    zhost::config::validate(zhost::config::Document(), schema);
  });
  return 0;
}
