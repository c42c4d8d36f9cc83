// tests/plugin_host/negotiation_test.cpp: the negotiation matrix on real shared objects, trust checks,
// discovery of a directory with good and bad plugins, and instance creation.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <utility>

#include "host/core/error.hpp"
#include "host/plugins/discovery.hpp"
#include "host/plugins/instances.hpp"
#include "host/plugins/loader.hpp"
#include "host/plugins/resolver.hpp"
#include "tests/support/scratch_dir.hpp"

namespace fs = std::filesystem;
using namespace zhost;

namespace {

fs::path plugin_file(const std::string& variant) {
  return fs::path(ZHOST_NEGOTIATION_PLUGIN_DIR) / ("zhost_np_" + variant + ".so");
}

// Loads `variant` and returns the error message, or "" when it loaded.
std::string load_error(const HostServices& host, const std::string& variant) {
  try {
    PluginLoader(host).load(plugin_file(variant));
    return "";
  } catch (const UsageError& e) {
    return e.what();
  }
}

using TempDir = zhost::testing::ScratchDir;

}  // namespace

TEST(Negotiation, SameVersionLoadsAndDescriptorIsRead) {
  HostServices host;
  LoadedPlugin plugin = PluginLoader(host).load(plugin_file("current"));
  EXPECT_EQ(plugin.info.name, "np_current");
  EXPECT_EQ(plugin.info.version, "1.2.3");
  EXPECT_EQ(plugin.info.kind, ZHOST_KIND_OFFLOAD);
  EXPECT_EQ(plugin.info.provides, std::vector<std::string>{"offload:np_current"});
  EXPECT_EQ(plugin.abi_minor, static_cast<uint32_t>(ZHOST_ABI_MINOR));
  EXPECT_TRUE(plugin.info.flags & ZHOST_PLUGIN_FLAG_HOT_SWAPPABLE);
  ASSERT_EQ(plugin.info.config_keys.size(), 2u);
  const auto& depth = plugin.info.config_keys[0];
  EXPECT_EQ(depth.key, "zero.offload_optimizer.np_current_depth");
  EXPECT_EQ(depth.type, ZHOST_CONFIG_INT);
  EXPECT_EQ(depth.default_literal.value(), "4");
  EXPECT_EQ(depth.min_value.value(), 1);
  EXPECT_EQ(depth.max_value.value(), 64);
  EXPECT_EQ(depth.doc, "queue depth of the test tier");              // a newline in the plugin's text: one line here
  EXPECT_EQ(plugin.info.summary, "negotiation-matrix test plugin");  // and a tab
  EXPECT_EQ(plugin.info.config_keys[1].choices, (std::vector<std::string>{"fast", "slow"}));
}

TEST(Negotiation, NewerHostMinorServesOlderPlugin) {
  HostServices host;  // this SDK's minor
  EXPECT_EQ(load_error(host, "old_minor"), "");
}

TEST(Negotiation, PluginNeedingNewerMinorIsRefusedNamingBothVersions) {
  HostServices host;
  std::string error = load_error(host, "needs_newer");
  EXPECT_NE(error.find("needs zhost ABI 1." + std::to_string(ZHOST_ABI_MINOR + 1) + " or newer"), std::string::npos)
      << error;
  EXPECT_NE(error.find("this host offers 1." + std::to_string(ZHOST_ABI_MINOR)), std::string::npos) << error;
  EXPECT_NE(error.find("zhost_np_needs_newer.so"), std::string::npos) << error;
}

TEST(Negotiation, PreOneZeroMajorIsRefusedNamingBothMajors) {
  HostServices host;
  std::string error = load_error(host, "wrong_major");
  EXPECT_NE(error.find("speaks zhost ABI major 0, this zhost speaks major 1"), std::string::npos) << error;
  EXPECT_NE(error.find("rebuild it against the zhost SDK 1.x"), std::string::npos) << error;
}

TEST(Negotiation, MissingEntrySymbolIsRefused) {
  HostServices host;
  std::string error = load_error(host, "no_entry");
  EXPECT_NE(error.find("no entry symbol 'zhost_plugin_v1'"), std::string::npos) << error;
}

TEST(Negotiation, UndersizedDescriptorIsRefused) {
  HostServices host;
  std::string error = load_error(host, "small_desc");
  EXPECT_NE(error.find(fmt::format("zhost_plugin_descriptor has struct_size 16, below its minimum of {} bytes",
                                   ZHOST_PLUGIN_DESCRIPTOR_MIN_SIZE)),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("built against headers older than any this host supports, or the struct is corrupt"),
            std::string::npos)
      << error;
}

TEST(Negotiation, PluginRefusalCarriesItsReason) {
  HostServices host;
  std::string error = load_error(host, "refuses");
  EXPECT_NE(error.find("refused to load: this test plugin refuses every host"), std::string::npos) << error;
}

TEST(Negotiation, InitFailureNamesPluginAndCause) {
  HostServices host;
  std::vector<LoadedPlugin> found{PluginLoader(host).load(plugin_file("init_fails"))};
  Resolution resolution = resolve_plugins({{"offload:np_init_fails", "test"}}, found);
  PluginInstances instances(host);
  try {
    instances.create_all(resolution, [](const LoadedPlugin&) { return std::map<std::string, ConfigValue>{}; });
    FAIL() << "create should have failed";
  } catch (const Error& e) {
    std::string error = e.what();
    EXPECT_NE(error.find("plugin 'np_init_fails'"), std::string::npos) << error;
    EXPECT_NE(error.find("failed to initialise: this test plugin always fails to initialise"), std::string::npos)
        << error;
  }
  EXPECT_TRUE(instances.all().empty());
}

TEST(Negotiation, InstancesAreCreatedAndDestroyed) {
  HostServices host;
  std::vector<LoadedPlugin> found{PluginLoader(host).load(plugin_file("current"))};
  Resolution resolution = resolve_plugins({{"offload:np_current", "test"}}, found);
  PluginInstances instances(host);
  instances.create_all(resolution, [](const LoadedPlugin&) { return std::map<std::string, ConfigValue>{}; });
  ASSERT_NE(instances.of_kind(ZHOST_KIND_OFFLOAD), nullptr);
  EXPECT_EQ(instances.of_kind(ZHOST_KIND_PARTITION), nullptr);
  instances.destroy_all();
  EXPECT_TRUE(instances.all().empty());
}

TEST(Trust, WorldWritablePluginIsRefused) {
  TempDir dir;
  fs::path copy = dir.path() / "zhost_np_current.so";
  fs::copy_file(plugin_file("current"), copy);
  ASSERT_EQ(chmod(copy.c_str(), 0777), 0);
  HostServices host;
  try {
    PluginLoader(host).load(copy);
    FAIL() << "a world-writable plugin must not load";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("refusing to load a world-writable plugin"), std::string::npos) << e.what();
  }
}

TEST(Trust, PluginInAWorldWritableFolderIsRefused) {
  TempDir dir;
  fs::path copy = dir.path() / "zhost_np_current.so";
  fs::copy_file(plugin_file("current"), copy);
  ASSERT_EQ(chmod(dir.path().c_str(), 0777), 0);
  HostServices host;
  try {
    PluginLoader(host).load(copy);
    FAIL() << "a plugin in a world-writable folder must not load";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("refusing to load a plugin from the world-writable folder"), std::string::npos)
        << e.what();
  }
  // With the sticky bit (like /tmp) only the file's owner can replace it: the file's own checks suffice.
  ASSERT_EQ(chmod(dir.path().c_str(), 01777), 0);
  EXPECT_EQ(PluginLoader(host).load(copy).info.name, "np_current");
}

TEST(Trust, GarbageFileIsRefused) {
  TempDir dir;
  fs::path garbage = dir.path() / "zhost_garbage.so";
  std::ofstream(garbage) << "not an ELF file";
  HostServices host;
  try {
    PluginLoader(host).load(garbage);
    FAIL();
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot load shared object"), std::string::npos) << e.what();
  }
}

// Plugins that crash (in the entry function or a constructor) or hang while loading are reported by name,
// and discovery goes on with the others: each file is loaded in a child process first.
TEST(Discovery, CrashingAndHangingPluginsAreReportedAndTheOthersLoad) {
  HostServices host;
  const auto started = std::chrono::steady_clock::now();
  Discovery discovery = discover_plugins({ZHOST_HOSTILE_PLUGIN_DIR, ZHOST_NEGOTIATION_PLUGIN_DIR}, PluginLoader(host),
                                         std::chrono::milliseconds(1000));
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5));
  std::vector<std::string> names;
  for (const auto& p : discovery.plugins) names.push_back(p.info.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"np_current", "np_init_fails", "np_old_minor"}));
  const auto failure_of = [&](const std::string& file) {
    for (const auto& failure : discovery.failures)
      if (failure.find("/" + file + ":") != std::string::npos) return failure;
    return std::string("no failure for " + file);
  };
  EXPECT_NE(failure_of("zhost_np_crashes.so").find(": crashed while loading (signal 11, "), std::string::npos)
      << failure_of("zhost_np_crashes.so");
  EXPECT_NE(failure_of("zhost_np_ctor_crashes.so").find(": crashed while loading (signal 11, "), std::string::npos)
      << failure_of("zhost_np_ctor_crashes.so");
  EXPECT_NE(failure_of("zhost_np_hangs.so").find(": did not finish loading within 1.0 s"), std::string::npos)
      << failure_of("zhost_np_hangs.so");
  // The probe passes on the loader's own reasons.
  EXPECT_NE(failure_of("zhost_np_no_entry.so").find("no entry symbol"), std::string::npos)
      << failure_of("zhost_np_no_entry.so");
}

TEST(Discovery, ScansDirectoryReportingEachFailureWithItsFile) {
  HostServices host;
  Discovery discovery = discover_plugins({ZHOST_NEGOTIATION_PLUGIN_DIR}, PluginLoader(host));
  std::vector<std::string> names;
  for (const auto& p : discovery.plugins) names.push_back(p.info.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"np_current", "np_init_fails", "np_old_minor"}));
  EXPECT_EQ(discovery.failures.size(), 5u);
  for (const auto& failure : discovery.failures) EXPECT_EQ(failure.rfind("plugin /", 0), 0u) << failure;
  EXPECT_THROW(require_no_failures(discovery), UsageError);
}

TEST(Discovery, SearchPathOrderAndEnvironment) {
  TempDir dir;
  const std::string a = (dir.path() / "a").string();
  const std::string b = (dir.path() / "b").string();
  std::filesystem::create_directories(a);
  std::filesystem::create_directories(b);
  setenv("ZHOST_PLUGIN_PATH", (a + ":" + b).c_str(), 1);
  auto path = plugin_search_path({"/cfg/dir"});
  unsetenv("ZHOST_PLUGIN_PATH");
  ASSERT_GE(path.size(), 4u);
  EXPECT_EQ(path[0], "/cfg/dir");
  EXPECT_EQ(path[1], a);
  EXPECT_EQ(path[2], b);
  EXPECT_EQ(path[3], installed_plugin_dir());
}

// A folder in ZHOST_PLUGIN_PATH that is missing is refused, as --plugin-path's is, naming the variable.
TEST(Discovery, MissingFolderInTheEnvironmentIsRefused) {
  TempDir dir;
  const std::string file = dir.write("file", "x");
  for (const auto& [entry, why] : {std::pair<std::string, std::string>{"/nonexistent", "does not exist"},
                                   std::pair<std::string, std::string>{file, "is not a folder"}}) {
    setenv("ZHOST_PLUGIN_PATH", (dir.path().string() + ":" + entry).c_str(), 1);
    try {
      plugin_search_path({});
      ADD_FAILURE() << entry << " was accepted";
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()),
                "ZHOST_PLUGIN_PATH names '" + entry + "', which " + why + "; fix or unset ZHOST_PLUGIN_PATH");
    }
    unsetenv("ZHOST_PLUGIN_PATH");
  }
}
