// tests/plugin_host/test_resolver.cpp: requirement resolution on descriptor data alone: satisfied sets
// and their order, missing needs and requirements, conflicts, cycles, and the keys of unused plugins.
#include <gtest/gtest.h>

#include "host/core/error.hpp"
#include "host/plugins/resolver.hpp"

using namespace zhost;

namespace {

LoadedPlugin plugin(const std::string& name, zhost_capability_kind kind, std::vector<std::string> provides,
                    std::vector<std::string> requires_caps = {}, std::vector<std::string> conflicts = {},
                    std::vector<std::string> keys = {}) {
  LoadedPlugin p;
  p.path = "/plugins/zhost_" + name + ".so";
  p.info.name = name;
  p.info.kind = kind;
  p.info.provides = std::move(provides);
  p.info.requires_caps = std::move(requires_caps);
  p.info.conflicts = std::move(conflicts);
  for (auto& k : keys) p.info.config_keys.push_back(ConfigKeyInfo{k, ZHOST_CONFIG_INT, "1", "doc", {}, {}, {}});
  return p;
}

std::string resolve_error(const std::vector<Need>& needs, const std::vector<LoadedPlugin>& found) {
  try {
    resolve_plugins(needs, found);
    return "";
  } catch (const UsageError& e) {
    return e.what();
  }
}

std::vector<std::string> names(const Resolution& r) {
  std::vector<std::string> out;
  for (auto* p : r.plugins) out.push_back(p->info.name);
  return out;
}

}  // namespace

TEST(Needs, DerivedFromZeroSelectors) {
  ZeroSelection zero;
  ASSERT_EQ(needs_for(zero).size(), 1u);
  EXPECT_EQ(needs_for(zero)[0].capability, "partition:stage0");
  zero.stage = 3;
  zero.offload_optimizer = "nvme";
  zero.offload_param = "cpu";
  zero.quantized_weights = true;
  auto needs = needs_for(zero);
  ASSERT_EQ(needs.size(), 4u);
  EXPECT_EQ(needs[0].capability, "partition:stage3");
  EXPECT_EQ(needs[0].reason, "zero.stage = 3");
  EXPECT_EQ(needs[1].capability, "offload:nvme");
  EXPECT_EQ(needs[2].capability, "offload:cpu");
  EXPECT_EQ(needs[3].capability, "collective:qwz");
}

TEST(Resolver, SatisfiedWithDependenciesFirst) {
  std::vector<LoadedPlugin> found{
      plugin("stage3", ZHOST_KIND_PARTITION, {"partition:stage3"}),
      plugin("offload_nvme", ZHOST_KIND_OFFLOAD, {"offload:nvme"}, {"offload:cpu"}),
      plugin("offload_cpu", ZHOST_KIND_OFFLOAD, {"offload:cpu"}),
  };
  ZeroSelection zero;
  zero.stage = 3;
  zero.offload_optimizer = "nvme";
  Resolution r = resolve_plugins(needs_for(zero), found);
  EXPECT_EQ(names(r), (std::vector<std::string>{"stage3", "offload_cpu", "offload_nvme"}));
  EXPECT_EQ(r.provider.at("offload:cpu")->info.name, "offload_cpu");
}

TEST(Resolver, FirstProviderInSearchOrderWins) {
  std::vector<LoadedPlugin> found{plugin("mine", ZHOST_KIND_OFFLOAD, {"offload:cpu"}),
                                  plugin("offload_cpu", ZHOST_KIND_OFFLOAD, {"offload:cpu"})};
  Resolution r = resolve_plugins({{"offload:cpu", "test"}}, found);
  EXPECT_EQ(names(r), std::vector<std::string>{"mine"});
}

TEST(Resolver, MissingNeedListsWhatWasFound) {
  std::vector<LoadedPlugin> found{plugin("stage1", ZHOST_KIND_PARTITION, {"partition:stage1"})};
  ZeroSelection zero;
  zero.stage = 2;
  std::string error = resolve_error(needs_for(zero), found);
  EXPECT_NE(error.find("zero.stage = 2 needs a plugin providing 'partition:stage2', but none was found"), std::string::npos)
      << error;
  EXPECT_NE(error.find("found: stage1 (partition:stage1)"), std::string::npos) << error;
  EXPECT_NE(error.find("ZHOST_PLUGIN_PATH"), std::string::npos) << error;
}

TEST(Resolver, MissingRequirementNamesTheRequiringPlugin) {
  std::vector<LoadedPlugin> found{plugin("offload_nvme", ZHOST_KIND_OFFLOAD, {"offload:nvme"}, {"offload:cpu"})};
  std::string error = resolve_error({{"offload:nvme", "zero.offload_optimizer.device = \"nvme\""}}, found);
  EXPECT_NE(error.find("plugin 'offload_nvme' requires 'offload:cpu', but no plugin providing 'offload:cpu' was found"),
            std::string::npos)
      << error;
}

TEST(Resolver, ConflictIsReportedWithBothPlugins) {
  std::vector<LoadedPlugin> found{plugin("stage3", ZHOST_KIND_PARTITION, {"partition:stage3"}, {}, {"collective:qgz"}),
                                  plugin("zeropp", ZHOST_KIND_COLLECTIVE, {"collective:qwz", "collective:qgz"})};
  std::string error = resolve_error({{"partition:stage3", "zero.stage = 3"}, {"collective:qwz", "q"}}, found);
  EXPECT_NE(error.find("plugins 'stage3'"), std::string::npos) << error;
  EXPECT_NE(error.find("'zeropp'"), std::string::npos) << error;
  EXPECT_NE(error.find("conflict"), std::string::npos) << error;
}

TEST(Resolver, CycleIsReportedWithItsPath) {
  std::vector<LoadedPlugin> found{plugin("tier_a", ZHOST_KIND_OFFLOAD, {"offload:a"}, {"offload:b"}),
                                  plugin("tier_b", ZHOST_KIND_OFFLOAD, {"offload:b"}, {"offload:a"})};
  std::string error = resolve_error({{"offload:a", "test"}}, found);
  EXPECT_NE(error.find("plugin dependency cycle: tier_a requires tier_b requires tier_a"), std::string::npos) << error;
}

TEST(Resolver, KeysOfUnusedPluginsAreInactiveWithReason) {
  std::vector<LoadedPlugin> found{
      plugin("stage1", ZHOST_KIND_PARTITION, {"partition:stage1"}, {}, {}, {"zero.reduce_bucket_size"}),
      plugin("stage2", ZHOST_KIND_PARTITION, {"partition:stage2"}, {}, {}, {"zero.reduce_bucket_size", "zero.overlap_comm"})};
  Resolution r = resolve_plugins({{"partition:stage1", "zero.stage = 1"}}, found);
  auto inactive = inactive_plugin_keys(r, found);
  EXPECT_EQ(inactive.count("zero.reduce_bucket_size"), 0u);  // stage1 reads it too
  ASSERT_EQ(inactive.count("zero.overlap_comm"), 1u);
  EXPECT_NE(inactive["zero.overlap_comm"].find("plugin 'stage2'"), std::string::npos);
}
