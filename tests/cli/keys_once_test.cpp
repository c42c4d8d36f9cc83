// tests/cli/keys_once_test.cpp: Note [Each key declared once] (host/job/job_setup.cpp) over the real host
// schema and zhost's own plugins as the binary loads them (`zhost plugins --json`): every config key has one
// declaration, in the host's schema or in one plugin's descriptor, and every key a plugin reads is declared.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "host/config/schema/host_schema.hpp"
#include "tests/cli/cli_support.hpp"
#include "tests/support/scratch_dir.hpp"

namespace {

struct Declarations {
  std::map<std::string, std::vector<std::string>> owners;   // key -> "the host", "plugin 'stage1'", ...
  std::map<std::string, std::vector<std::string>> readers;  // key -> plugins that read it without declaring it
  std::set<std::string> plugins;
};

Declarations in_tree_declarations() {
  Declarations found;
  zhost::config::Schema host;
  zhost::config::add_host_keys(host);
  for (const auto* spec : host.keys()) found.owners[spec->path].push_back("the host");

  zhost::testing::ScratchDir scratch;
  unsetenv("ZHOST_PLUGIN_PATH");
  auto result = zhost::testing::run_zhost(scratch.path(), "plugins --json");
  EXPECT_EQ(result.exit_code, 0) << result.err;
  const nlohmann::json listing = nlohmann::json::parse(result.out);
  EXPECT_TRUE(listing["failures"].empty()) << listing["failures"].dump();
  for (const auto& plugin : listing["plugins"]) {
    const std::string name = plugin["name"].get<std::string>();
    found.plugins.insert(name);
    for (const auto& key : plugin["config_keys"])
      found.owners[key["key"].get<std::string>()].push_back("plugin '" + name + "'");
    for (const auto& key : plugin["reads_keys"]) found.readers[key.get<std::string>()].push_back(name);
  }
  return found;
}

TEST(KeysOnce, EveryKeyIsDeclaredInOnePlace) {
  const Declarations found = in_tree_declarations();
  // zhost's own plugins, so that a listing that lost some cannot pass.
  for (const char* name : {"stage0", "stage1", "stage2", "stage3", "offload_cpu", "offload_nvme", "quant_zeropp"})
    EXPECT_TRUE(found.plugins.count(name)) << "`zhost plugins` did not list plugin '" << name << "'";
  EXPECT_GT(found.owners.size(), 150u);
  int twice = 0;
  for (const auto& [key, owners] : found.owners) {
    if (owners.size() == 1) continue;
    ++twice;
    std::string list;
    for (const auto& owner : owners) list += (list.empty() ? "" : " and ") + owner;
    ADD_FAILURE() << key << " is declared by " << list
                  << ": declare it once and let the others read it (reads_keys, Note [Each key declared once])";
  }
  EXPECT_EQ(twice, 0);
}

TEST(KeysOnce, EveryKeyAPluginReadsIsDeclared) {
  const Declarations found = in_tree_declarations();
  EXPECT_FALSE(found.readers.empty());
  for (const auto& [key, readers] : found.readers)
    EXPECT_TRUE(found.owners.count(key)) << key << " is read by plugin '" << readers.front()
                                         << "', but neither the host nor a plugin declares it";
}

}  // namespace
