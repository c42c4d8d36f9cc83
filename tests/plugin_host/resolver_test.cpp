// tests/plugin_host/resolver_test.cpp: requirement resolution on descriptor data alone: satisfied sets
// and their order, missing needs and requirements, conflicts, cycles, the keys of unused plugins, and
// tier roles (declared or inferred, checked, composed, ordered before the plugins that use them).
#include "host/plugins/resolver.hpp"

#include <gtest/gtest.h>

#include "host/core/error.hpp"
#include "zhost/zhost.h"

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
  p.abi_minor = ZHOST_ABI_MINOR;
  return p;
}

constexpr uint64_t kStores = ZHOST_PLUGIN_FLAG_TIER_STORES;
constexpr uint64_t kComputes = ZHOST_PLUGIN_FLAG_TIER_STORES | ZHOST_PLUGIN_FLAG_TIER_COMPUTES;
constexpr uint64_t kComposes = kComputes | ZHOST_PLUGIN_FLAG_TIER_USES_STORAGE;

LoadedPlugin tier(const std::string& name, const std::string& capability, uint64_t flags) {
  LoadedPlugin p = plugin(name, ZHOST_KIND_OFFLOAD, {capability});
  p.info.flags = flags;
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
  zero.optimizer_device_stores = true;  // as the tier found declares (ZHOST_PLUGIN_FLAG_TIER_DEVICE_STORES)
  zero.offload_param = "cpu";
  zero.quantized_weights = true;
  auto needs = needs_for(zero);
  ASSERT_EQ(needs.size(), 5u);
  EXPECT_EQ(needs[0].capability, "partition:stage3");
  EXPECT_EQ(needs[0].reason, "zero.stage = 3");
  // DeepSpeed's device = "nvme", a tier that keeps the states as the device: it stores them, the CPU tier steps
  // them.
  EXPECT_EQ(needs[1].capability, "offload:nvme");
  EXPECT_EQ(needs[1].role, ZHOST_TIER_FOR_OPTIMIZER_STORAGE);
  EXPECT_EQ(needs[2].capability, "offload:cpu");
  EXPECT_EQ(needs[2].role, ZHOST_TIER_FOR_OPTIMIZER);
  EXPECT_EQ(needs[3].capability, "offload:cpu");
  EXPECT_EQ(needs[3].role, ZHOST_TIER_FOR_PARAMS);
  EXPECT_EQ(needs[4].capability, "collective:qwz");
  EXPECT_FALSE(needs[4].role.has_value());
}

TEST(Resolver, SatisfiedWithDependenciesFirst) {
  std::vector<LoadedPlugin> found{
      plugin("stage3", ZHOST_KIND_PARTITION, {"partition:stage3"}, {"collective:x"}),
      plugin("xform", ZHOST_KIND_COLLECTIVE, {"collective:x"}),
  };
  Resolution r = resolve_plugins({{"partition:stage3", "zero.stage = 3"}}, found);
  EXPECT_EQ(names(r), (std::vector<std::string>{"xform", "stage3"}));
}

// Tiers are created before the plugins that use them and destroyed after them (instances go in reverse
// order): storage, then compute, then the partition plugin, whatever the order of the needs.
TEST(TierRoles, TiersComeFirstStorageBeforeCompute) {
  std::vector<LoadedPlugin> found{plugin("stage3", ZHOST_KIND_PARTITION, {"partition:stage3"}),
                                  tier("offload_nvme", "offload:nvme", kStores),
                                  tier("offload_cpu", "offload:cpu", kComposes)};
  ZeroSelection zero;
  zero.stage = 3;
  zero.offload_optimizer = "nvme";
  zero.optimizer_device_stores = true;
  Resolution r = resolve_plugins(needs_for(zero), found);
  EXPECT_EQ(names(r), (std::vector<std::string>{"offload_nvme", "offload_cpu", "stage3"}));
  EXPECT_EQ(r.tiers.at(ZHOST_TIER_FOR_OPTIMIZER)->info.name, "offload_cpu");
  EXPECT_EQ(r.tiers.at(ZHOST_TIER_FOR_OPTIMIZER_STORAGE)->info.name, "offload_nvme");
  EXPECT_EQ(r.roles_of(&found[2]), std::vector<std::string>{"optimizer-compute"});
  EXPECT_EQ(r.roles_of(&found[1]), std::vector<std::string>{"optimizer-storage"});
  EXPECT_TRUE(r.roles_of(&found[0]).empty());
}

TEST(TierRoles, StorageOnlyTierAsOptimizerIsRefusedNamingTierAndRole) {
  std::vector<LoadedPlugin> found{plugin("stage1", ZHOST_KIND_PARTITION, {"partition:stage1"}),
                                  tier("hello_tier", "offload:hello", kStores)};
  ZeroSelection zero;
  zero.stage = 1;
  zero.offload_optimizer = "hello";
  std::string error = resolve_error(needs_for(zero), found);
  EXPECT_NE(error.find("zero.offload_optimizer.device = \"hello\" asks plugin 'hello_tier' "
                       "(/plugins/zhost_hello_tier.so) to run the optimizer (role optimizer-compute), but it declares "
                       "only storing buffers"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("zero.offload_optimizer.storage = \"hello\""), std::string::npos) << error;
}

TEST(TierRoles, ComposedPairIsAccepted) {
  std::vector<LoadedPlugin> found{plugin("stage2", ZHOST_KIND_PARTITION, {"partition:stage2"}),
                                  tier("offload_cpu", "offload:cpu", kComposes),
                                  tier("hello_tier", "offload:hello", kStores)};
  ZeroSelection zero;
  zero.stage = 2;
  zero.offload_optimizer = "cpu";
  zero.offload_optimizer_storage = "hello";
  Resolution r = resolve_plugins(needs_for(zero), found);
  EXPECT_EQ(names(r), (std::vector<std::string>{"hello_tier", "offload_cpu", "stage2"}));
  EXPECT_EQ(r.roles_of(&found[2]), std::vector<std::string>{"optimizer-storage"});
}

TEST(TierRoles, CompositionNeedsAComputingTierThatUsesStorage) {
  std::vector<LoadedPlugin> found{plugin("stage2", ZHOST_KIND_PARTITION, {"partition:stage2"}),
                                  tier("offload_cpu", "offload:cpu", kComputes),
                                  tier("hello_tier", "offload:hello", kStores)};
  ZeroSelection zero;
  zero.stage = 2;
  zero.offload_optimizer = "cpu";
  zero.offload_optimizer_storage = "hello";
  EXPECT_NE(resolve_error(needs_for(zero), found).find("cannot keep its states in another tier"), std::string::npos);
  zero.offload_optimizer = "none";
  try {
    needs_for(zero);
    ADD_FAILURE() << "a storage tier without a computing one was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("no tier runs the optimizer"), std::string::npos) << e.what();
  }
}

TEST(TierRoles, ParamsRoleNeedsAStoringTier) {
  std::vector<LoadedPlugin> found{plugin("stage3", ZHOST_KIND_PARTITION, {"partition:stage3"}),
                                  tier("offload_cpu", "offload:cpu", kComposes),
                                  tier("compute_only", "offload:co", ZHOST_PLUGIN_FLAG_TIER_COMPUTES)};
  ZeroSelection zero;
  zero.stage = 3;
  zero.offload_optimizer = "cpu";
  zero.offload_param = "co";
  EXPECT_NE(resolve_error(needs_for(zero), found)
                .find("to store buffers (role params), but it declares running the optimizer"),
            std::string::npos);
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
  EXPECT_NE(error.find("zero.stage = 2 needs a plugin providing 'partition:stage2', but none was found"),
            std::string::npos)
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
      plugin("stage2", ZHOST_KIND_PARTITION, {"partition:stage2"}, {}, {},
             {"zero.reduce_bucket_size", "zero.overlap_comm"})};
  Resolution r = resolve_plugins({{"partition:stage1", "zero.stage = 1"}}, found);
  auto inactive = inactive_plugin_keys(r, found);
  EXPECT_EQ(inactive.count("zero.reduce_bucket_size"), 0u);  // stage1 reads it too
  ASSERT_EQ(inactive.count("zero.overlap_comm"), 1u);
  EXPECT_NE(inactive["zero.overlap_comm"].find("plugin 'stage2'"), std::string::npos);
}
