// tests/cli/cli_test.cpp: runs the real zhost executable and checks its output, error lines and exit
// codes for `version`, `plugins` and `config check`, with fixture plugins and with broken plugins.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>
#include <vector>

#include "tests/cli/cli_support.hpp"
#include "tests/support/scratch_dir.hpp"
#include "zhost/core.h"

namespace fs = std::filesystem;

namespace {

using Result = zhost::testing::CliResult;

class Cli : public ::testing::Test {
 protected:
  void SetUp() override { unsetenv("ZHOST_PLUGIN_PATH"); }

  fs::path write_config(const std::string& text) {
    fs::path file = dir_ / "train.toml";
    std::ofstream(file) << text;
    return file;
  }

  // Runs zhost with `args` (shell words, already quoted where needed) from the scratch folder; `prefix` comes
  // before the executable (e.g. "timeout 10 ").
  Result zhost(const std::string& args, const std::string& prefix = "") {
    return zhost::testing::run_zhost(dir_, args, prefix);
  }

  std::string fixtures() const { return std::string(" --plugin-path ") + ZHOST_CLI_PLUGIN_DIR; }

  zhost::testing::ScratchDir scratch_;
  const fs::path& dir_ = scratch_.path();
};

}  // namespace

TEST_F(Cli, VersionNamesTheAbi) {
  Result r = zhost("version");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("plugin ABI " + std::to_string(ZHOST_ABI_MAJOR) + "." + std::to_string(ZHOST_ABI_MINOR)),
            std::string::npos)
      << r.out;
}

TEST_F(Cli, PluginsJsonDescribesEachPlugin) {
  Result r = zhost("plugins --json" + fixtures());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto json = nlohmann::json::parse(r.out);
  // The two fixtures, zhost's own plugins from the build tree's plugin folder, then the built-in stage0.
  ASSERT_EQ(json["plugins"].size(), 9u) << r.out;
  const auto& stage2 = json["plugins"][1];
  EXPECT_EQ(stage2["name"], "tp_stage2");
  EXPECT_EQ(stage2["kind"], "partition");
  EXPECT_EQ(stage2["abi"], std::to_string(ZHOST_ABI_MAJOR) + "." + std::to_string(ZHOST_ABI_MINOR));
  EXPECT_EQ(stage2["provides"], nlohmann::json::array({"partition:stage2"}));
  ASSERT_EQ(stage2["config_keys"].size(), 2u);
  EXPECT_EQ(stage2["config_keys"][0]["key"], "zero.reduce_bucket_size");
  EXPECT_EQ(stage2["config_keys"][0]["type"], "int");
  EXPECT_EQ(stage2["config_keys"][0]["default"], "500000000");
  EXPECT_EQ(json["plugins"][2]["name"], "offload_cpu");
  EXPECT_EQ(json["plugins"][3]["name"], "offload_nvme");
  EXPECT_EQ(json["plugins"][4]["name"], "quant_zeropp");
  EXPECT_EQ(json["plugins"][4]["kind"], "collective");
  EXPECT_EQ(json["plugins"][5]["name"], "stage1");
  EXPECT_EQ(json["plugins"][7]["name"], "stage3");
  EXPECT_EQ(json["plugins"][8]["path"], "<built-in>");
  EXPECT_TRUE(json["failures"].empty());
}

TEST_F(Cli, PluginsReportsEveryBrokenPluginAndFails) {
  Result r = zhost(std::string("plugins --plugin-path ") + ZHOST_BINARY_DIR + "/test_plugins/negotiation");
  EXPECT_EQ(r.exit_code, 2);
  for (const char* file : {"np_needs_newer", "np_no_entry", "np_refuses", "np_small_desc", "np_wrong_major"})
    EXPECT_NE(r.err.find(std::string("zhost: error: plugin ") + ZHOST_BINARY_DIR + "/test_plugins/negotiation/zhost_" +
                         file + ".so: "),
              std::string::npos)
        << file << "\n"
        << r.err;
  EXPECT_NE(r.out.find("np_current 1.2.3"), std::string::npos) << r.out;
}

TEST_F(Cli, ConfigCheckPrintsDefaultsAndOrigins) {
  write_config("steps = 7\n[optimizer]\nlr = 3e-4\n");
  Result r = zhost("config check train.toml" + fixtures());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("steps = 7"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("train.toml:1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("stage = 0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("stage0 0.1.0 (<built-in>) for zero.stage = 0"), std::string::npos) << r.out;
}

TEST_F(Cli, UnknownKeyGetsSuggestionLineAndExitCode2) {
  write_config("steps = 1\n[zero]\nstgae = 2\n");
  Result r = zhost("config check train.toml" + fixtures());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("zhost: error: train.toml:3: unknown key 'zero.stgae'; did you mean 'zero.stage'?"),
            std::string::npos)
      << r.err;
}

TEST_F(Cli, EveryConfigErrorIsItsOwnLine) {
  write_config("steps = \"many\"\nsteps_per_print = 0\n");
  Result r = zhost("config check train.toml");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("zhost: error: train.toml:1: steps must be an integer"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("zhost: error: train.toml:2: steps_per_print = 0 is out of range"), std::string::npos) << r.err;
}

TEST_F(Cli, StageSelectsItsPluginAndItsKeys) {
  write_config("[zero]\nstage = 2\nreduce_bucket_size = 5e7\noverlap_comm = true\n");
  Result r = zhost("config check train.toml" + fixtures());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("reduce_bucket_size = 50000000"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tp_stage2 0.0.1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("for zero.stage = 2"), std::string::npos) << r.out;
}

TEST_F(Cli, KeyOfAnUnusedPluginIsRejectedWithTheReason) {
  write_config("[zero]\nstage = 1\noverlap_comm = true\n");
  Result r = zhost("config check train.toml" + fixtures());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("train.toml:3: zero.overlap_comm is set, but it is read by plugin 'tp_stage2'"),
            std::string::npos)
      << r.err;
}

TEST_F(Cli, MissingProviderListsWhatWasFound) {
  write_config("[zero]\nstage = 2\n[zero.offload_optimizer]\ndevice = \"ssd\"\n");
  Result r = zhost("config check train.toml" + fixtures());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("needs a plugin providing 'offload:ssd', but none was found (found: "
                       "tp_stage1 (partition:stage1); tp_stage2 (partition:stage2); offload_cpu (offload:cpu); "
                       "offload_nvme (offload:nvme); quant_zeropp (collective:qwz, collective:qgz, collective:hpz, "
                       "collective:loco); "
                       "stage1 (partition:stage1); stage2 (partition:stage2); stage3 (partition:stage3); "
                       "stage0 (partition:stage0))"),
            std::string::npos)
      << r.err;
}

TEST_F(Cli, OverridesApplyAndAreChecked) {
  write_config("steps = 1\n");
  Result ok = zhost("config check train.toml --set zero.stage=1 --set zero.reduce_bucket_size=1000" + fixtures());
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("reduce_bucket_size = 1000"), std::string::npos) << ok.out;
  Result bad = zhost("config check train.toml --set optimizer.lrr=0.1" + fixtures());
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--set optimizer.lrr=0.1: unknown key 'optimizer.lrr'; did you mean 'optimizer.lr'?"),
            std::string::npos)
      << bad.err;
}

TEST_F(Cli, MissingConfigFileIsAUsageError) {
  Result r = zhost("config check nowhere.toml");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("nowhere.toml"), std::string::npos) << r.err;
}

// A FIFO as the config is refused at once (reading it would wait for a writer forever).
TEST_F(Cli, FifoAsTheConfigIsRefusedAtOnce) {
  ASSERT_EQ(mkfifo((dir_ / "fifo.toml").c_str(), 0600), 0);
  for (const char* command : {"config check fifo.toml", "run fifo.toml"}) {
    Result r = zhost(command, "timeout 10 ");  // 124 when it hangs
    EXPECT_EQ(r.exit_code, 2) << command << "\n" << r.err;
    EXPECT_NE(r.err.find("'fifo.toml' is not a regular file (a FIFO, socket or device); give a TOML file"),
              std::string::npos)
        << r.err;
  }
}

// Process options that would be ignored or would do harm are refused, each with its reason.
TEST_F(Cli, ProcessOptionsAreCheckedNotIgnored) {
  write_config("steps = 1\n");
  const std::string file = (dir_ / "train.toml").string();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"run train.toml --nproc 0", "--nproc: must be a number of ranks, at least 1; got '0'"},
      {"run train.toml --nproc -1", "--nproc: must be a number of ranks, at least 1; got '-1'"},
      {"run train.toml --master-port 29999", "--master-port requires --nproc"},
      {"run train.toml --nnodes 2", "--nnodes requires --nproc"},
      {"run train.toml --master-addr 10.0.0.1", "--master-addr requires --nproc"},
      {"config check train.toml --plugin-path " + (dir_ / "missing").string(), "Directory does not exist"},
      {"plugins --plugin-path " + file, "Directory is actually a file"},
      {"run train.toml --nproc 100000", "--nproc 100000 is more than this node's limit of"},
      {"run train.toml --nproc 2 --master-addr no-such-host.invalid",
       "--master-addr 'no-such-host.invalid' does not resolve"},
  };
  for (const auto& [args, message] : cases) {
    Result r = zhost(args);
    EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.err;
    if (r.err.find("without the training engine") == std::string::npos)
      EXPECT_NE(r.err.find(message), std::string::npos) << args << "\n" << r.err;
  }
}

// --log-level is a global option; it may also follow the subcommand.
TEST_F(Cli, LogLevelMayFollowTheSubcommand) {
  write_config("steps = 1\n");
  EXPECT_EQ(zhost("config check train.toml --log-level warn").exit_code, 0);
  EXPECT_EQ(zhost("version --log-level warn").exit_code, 0);
  Result r = zhost("version --log-level loud");
  EXPECT_EQ(r.exit_code, 2);
}

// A plugin that crashes or hangs while loading does not take `zhost plugins` down: it is named, and the
// others are listed.
TEST_F(Cli, PluginsSurvivesCrashingPlugins) {
  Result r = zhost(std::string("plugins --plugin-path ") + ZHOST_BINARY_DIR + "/test_plugins/hostile");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  for (const char* file : {"np_crashes", "np_ctor_crashes"}) {
    EXPECT_NE(r.err.find(std::string("zhost: error: plugin ") + ZHOST_BINARY_DIR + "/test_plugins/hostile/zhost_" +
                         file + ".so: crashed while loading (signal 11"),
              std::string::npos)
        << file << "\n"
        << r.err;
  }
  EXPECT_NE(r.err.find("zhost_np_hangs.so: did not finish loading within"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("stage1"), std::string::npos) << r.out;
}

// A job does not start with a broken plugin on its search path, and the message says so: it names the plugin
// and what to do, and does not claim that zhost goes on without it.
TEST_F(Cli, RunRefusesACrashingPluginOnTheSearchPath) {
  write_config("steps = 1\n");
  Result r = zhost(std::string("run train.toml --plugin-path ") + ZHOST_BINARY_DIR + "/test_plugins/hostile");
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("zhost_np_crashes.so: crashed while loading (signal 11"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("remove it from the search path"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("goes on without it"), std::string::npos) << r.err;
}

// A plugin folder that does not exist is refused wherever it is named (--plugin-path, plugins.path,
// ZHOST_PLUGIN_PATH), naming where it came from: a typo must not silently leave its plugins out.
TEST_F(Cli, EveryPluginFolderMustExistWhereverItIsNamed) {
  write_config("steps = 1\n[plugins]\npath = [\"/nonexistent\"]\n");
  for (const char* command : {"config check train.toml", "run train.toml"}) {
    Result r = zhost(command);
    EXPECT_EQ(r.exit_code, 2) << command << "\n" << r.err;
    EXPECT_NE(r.err.find("zhost: error: train.toml: plugins.path names '/nonexistent', which does not exist; fix "
                         "the entry or remove it"),
              std::string::npos)
        << command << "\n"
        << r.err;
  }
  write_config("steps = 1\n");
  for (const char* command : {"config check train.toml", "run train.toml", "plugins"}) {
    Result r = zhost(command, "ZHOST_PLUGIN_PATH=/nonexistent ");
    EXPECT_EQ(r.exit_code, 2) << command << "\n" << r.err;
    EXPECT_NE(r.err.find("zhost: error: ZHOST_PLUGIN_PATH names '/nonexistent', which does not exist; fix or unset "
                         "ZHOST_PLUGIN_PATH"),
              std::string::npos)
        << command << "\n"
        << r.err;
  }
}
