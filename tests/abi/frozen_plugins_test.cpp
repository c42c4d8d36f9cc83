// tests/abi/frozen_plugins_test.cpp: tiers built against the frozen SDK headers of each released ABI
// (tests/abi/frozen) load into this host through its real loader (dlopen), negotiate, are created with their
// config, store and load buffers, report memory, export and import their state, and are destroyed. A tier of
// an older minor hands the host tables smaller than this SDK's: accepted from their minimum size (docs/abi.md,
// "Versioning rule").
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "host/core/error.hpp"
#include "host/plugins/instances.hpp"
#include "host/plugins/loader.hpp"
#include "host/plugins/resolver.hpp"
#include "host/services/host_services.hpp"
#include "zhost/storage.h"

namespace fs = std::filesystem;
using namespace zhost;

namespace {

struct FrozenTier {
  int major, minor;
  size_t storage_table_size;  // what a tier of that release fills
  std::string folder() const { return "v" + std::to_string(major) + "_" + std::to_string(minor); }
};

void PrintTo(const FrozenTier& tier, std::ostream* out) { *out << "ABI " << tier.major << "." << tier.minor; }

class FrozenPlugins : public ::testing::TestWithParam<FrozenTier> {
 protected:
  std::string name() const { return "frozen_tier_" + GetParam().folder(); }
  fs::path file() const { return fs::path(ZHOST_FROZEN_PLUGIN_DIR) / ("zhost_" + name() + ".so"); }
};

// A host-memory DLTensor over `values`.
DLTensor host_view(std::vector<float>& values, int64_t& length) {
  length = static_cast<int64_t>(values.size());
  DLTensor t{};
  t.data = values.data();
  t.device = {kDLCPU, 0};
  t.ndim = 1;
  t.dtype = {kDLFloat, 32, 1};
  t.shape = &length;
  return t;
}

void check(const HostServices& host, zhost_status* status, const char* what) {
  if (!status) return;
  std::string message = host.table()->status_message(status);
  host.table()->status_destroy(status);
  FAIL() << what << ": " << message;
}

int32_t append(void* user, const void* bytes, size_t len) {
  auto* out = static_cast<std::vector<char>*>(user);
  out->insert(out->end(), static_cast<const char*>(bytes), static_cast<const char*>(bytes) + len);
  return 0;
}

struct Reader {
  const std::vector<char>* bytes;
  size_t at = 0;
};
int64_t consume(void* user, void* out, size_t capacity) {
  auto* reader = static_cast<Reader*>(user);
  size_t n = std::min(capacity, reader->bytes->size() - reader->at);
  std::memcpy(out, reader->bytes->data() + reader->at, n);
  reader->at += n;
  return static_cast<int64_t>(n);
}

}  // namespace

TEST_P(FrozenPlugins, LoadNegotiateCreateRunAndDestroy) {
  HostServices host;  // this SDK's minor
  std::vector<LoadedPlugin> found{PluginLoader(host).load(file())};
  const LoadedPlugin& plugin = found.front();
  EXPECT_EQ(plugin.info.name, name());
  EXPECT_EQ(plugin.abi_minor, static_cast<uint32_t>(GetParam().minor));
  EXPECT_EQ(plugin.min_host_minor, static_cast<uint32_t>(GetParam().minor));
  ASSERT_EQ(plugin.info.config_keys.size(), 1u);
  EXPECT_EQ(plugin.info.config_keys[0].key, "zero.offload_optimizer." + name() + "_depth");
  const zhost_storage_api* api = plugin.api->storage;
  ASSERT_NE(api, nullptr);
  EXPECT_EQ(plugin.api->optimizer, nullptr);  // a storing tier only
  EXPECT_EQ(api->struct_size, GetParam().storage_table_size);
  EXPECT_GE(api->struct_size, static_cast<size_t>(ZHOST_STORAGE_API_MIN_SIZE));

  Resolution resolution = resolve_plugins({{"offload:" + name(), "test"}}, found);
  PluginInstances instances(host);
  instances.create_all(resolution, [&](const LoadedPlugin&) {
    return std::map<std::string, ConfigValue>{{"zero.offload_optimizer." + name() + "_depth", int64_t{2}}};
  });
  const PluginInstance* tier = instances.of_kind(ZHOST_KIND_OFFLOAD);
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(host.live_buffer_bytes(ZHOST_MEMORY_HOST), 4096u);  // the buffer it allocated at create()

  std::vector<float> values{1.5f, -2.f, 3.25f, 0.f, 42.f};
  int64_t length = 0;
  DLTensor source = host_view(values, length);
  zhost_tier_io_args io{};
  io.struct_size = sizeof(io);
  io.key = 7;
  io.data = &source;
  check(host, api->store(tier->instance, &io), "store");
  EXPECT_EQ(io.event, nullptr);

  zhost_tier_memory memory{};
  memory.struct_size = sizeof(memory);
  check(host, api->memory(tier->instance, &memory), "memory");
  EXPECT_EQ(memory.host_bytes, values.size() * sizeof(float));

  std::vector<float> loaded(values.size(), 0.f);
  int64_t loaded_length = 0;
  DLTensor destination = host_view(loaded, loaded_length);
  io.data = &destination;
  check(host, api->load(tier->instance, &io), "load");
  EXPECT_EQ(loaded, values);

  // Export, drop, import: the buffer comes back.
  std::vector<char> state;
  zhost_tier_stream_args out{sizeof(out), nullptr, append, nullptr, &state};
  check(host, api->export_state(tier->instance, &out), "export_state");
  zhost_tier_key_args drop{sizeof(drop), nullptr, 7};
  check(host, api->drop(tier->instance, &drop), "drop");
  std::fill(loaded.begin(), loaded.end(), 0.f);
  zhost_status* missing = api->load(tier->instance, &io);
  ASSERT_NE(missing, nullptr);
  host.table()->status_destroy(missing);
  Reader reader{&state};
  zhost_tier_stream_args in{sizeof(in), nullptr, nullptr, consume, &reader};
  check(host, api->import_state(tier->instance, &in), "import_state");
  check(host, api->load(tier->instance, &io), "load after import");
  EXPECT_EQ(loaded, values);

  instances.destroy_all();
  EXPECT_TRUE(instances.all().empty());
  EXPECT_EQ(host.live_buffer_bytes(ZHOST_MEMORY_HOST), 0u);  // released by the plugin's destroy()
}

INSTANTIATE_TEST_SUITE_P(Releases, FrozenPlugins,
                         ::testing::Values(FrozenTier{1, 0, ZHOST_STORAGE_API_SIZE},
                                           FrozenTier{1, 1, ZHOST_STORAGE_API_SIZE}),
                         [](const ::testing::TestParamInfo<FrozenTier>& tier) { return tier.param.folder(); });
