// tests/zero/stage3_logic_test.cpp: ZeRO stage 3's bookkeeping without collectives: how parameters are
// grouped into fetch units, sharded and sub-grouped, and how the recorded block order drives reuse and
// prefetch decisions, and which residency moves a fetch unit may make.
#include <gtest/gtest.h>

#include "plugins/stage3/block_trace.hpp"
#include "plugins/stage3/fetch_units.hpp"
#include "plugins/stage3/unit_residency.hpp"
#include "zhost/cpp/error.hpp"

namespace zhost::stage3 {
namespace {

// Blocks: 0 owns params 0 (1000) and 1 (10), 1 owns 2 (500) and 3 (10), 2 owns 4 (7).
const std::vector<int64_t> kNumels{1000, 10, 500, 10, 7};
const std::vector<int32_t> kOwners{0, 0, 1, 1, 2};

TEST(FetchUnits, OneUnitPerBlockPaddedToEqualShards) {
  FetchUnits units(kNumels, kOwners, 3, 3, /*persistence=*/0, /*sub_group=*/1 << 30);
  ASSERT_EQ(units.units().size(), 3u);
  const FetchUnit& first = units.units()[0];
  EXPECT_EQ(first.params, (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(first.offsets, (std::vector<int64_t>{0, 1000}));
  EXPECT_EQ(first.numel, 1010);
  EXPECT_EQ(first.shard, 337);  // ceil(1010 / 3): the last rank's shard ends with 1 element of padding
  EXPECT_EQ(first.padded(), 1011);
  EXPECT_EQ(units.units()[2].shard, 3);  // 7 elements over 3 ranks
  EXPECT_EQ(units.unit_of(3), 1);
  EXPECT_EQ(units.offset_of(3), 500);
  EXPECT_EQ(units.persistent_unit(), -1);
  EXPECT_EQ(units.shard_elements(), 337 + 170 + 3);
}

TEST(FetchUnits, SmallParametersFormThePersistentUnit) {
  FetchUnits units(kNumels, kOwners, 3, 2, /*persistence=*/10, 1 << 30);
  ASSERT_EQ(units.units().size(), 3u);  // block 0, block 1, persistent (block 2's only parameter is small)
  EXPECT_EQ(units.persistent_unit(), 2);
  EXPECT_TRUE(units.units()[2].persistent);
  EXPECT_EQ(units.units()[2].params, (std::vector<uint32_t>{1, 3, 4}));
  EXPECT_EQ(units.units_read({0, 1}), (std::vector<int>{0, 2}));
  EXPECT_EQ(units.units_read({4, 0}), (std::vector<int>{0, 2}));  // a tied read of block 0's parameter
}

TEST(FetchUnits, SubGroupsCollectConsecutiveShardsWithinTheirSize) {
  FetchUnits units(kNumels, kOwners, 3, 1, 0, /*sub_group=*/1200);
  // shards 1010, 510, 7: [1010] then [510, 7]
  ASSERT_EQ(units.sub_groups().size(), 2u);
  EXPECT_EQ(units.sub_groups()[0].units, (std::vector<int>{0}));
  EXPECT_EQ(units.sub_groups()[1].units, (std::vector<int>{1, 2}));
  EXPECT_EQ(units.units()[2].sub_group_offset, 510);
  FetchUnits tiny(kNumels, kOwners, 3, 1, 0, /*sub_group=*/1);  // every unit alone, even when larger
  EXPECT_EQ(tiny.sub_groups().size(), 3u);
}

// Blocks 0, 1, 2 read units {0}, {1}, {2, 0} (block 2 reads block 0's weight, as a tied head).
BlockTrace make_trace() { return BlockTrace({{0}, {1}, {0, 2}}, {100, 50, 10}); }

void run_micro_batch(BlockTrace& trace, const std::vector<BlockEvent>& events) {
  trace.begin_micro_batch();
  for (const BlockEvent& e : events) trace.advance(e);
}

const std::vector<BlockEvent> kOrder{{false, 0}, {false, 1}, {false, 2}, {true, 2}, {true, 1}, {true, 0}};

TEST(BlockTrace, RecordsTheFirstMicroBatchThenFollowsIt) {
  BlockTrace trace = make_trace();
  run_micro_batch(trace, kOrder);
  EXPECT_FALSE(trace.following());        // recording
  EXPECT_FALSE(trace.end_micro_batch());  // a first recording is not a change
  EXPECT_EQ(trace.recorded(), kOrder);
  trace.begin_micro_batch();
  EXPECT_TRUE(trace.advance(kOrder[0]));
  // Next come units 1, then 2 and 0 (0 first needed by block 2's forward).
  EXPECT_EQ(trace.upcoming_units(), (std::vector<int>{1, 0, 2}));
  for (size_t i = 1; i < kOrder.size(); ++i) EXPECT_TRUE(trace.advance(kOrder[i]));
  EXPECT_FALSE(trace.end_micro_batch());
}

TEST(BlockTrace, ReuseDistanceCountsTheOtherUnitsReadBeforeTheNextUse) {
  BlockTrace trace = make_trace();
  run_micro_batch(trace, kOrder);
  trace.end_micro_batch();
  trace.begin_micro_batch();
  trace.advance(kOrder[0]);
  // After forward of block 0, unit 0 is next read by forward of block 2, after unit 1 (50 elements).
  EXPECT_TRUE(trace.reused_within(0, 50));
  EXPECT_FALSE(trace.reused_within(0, 49));
  trace.advance(kOrder[1]);
  trace.advance(kOrder[2]);
  // After forward of block 2: backward of block 2 reads units 0 and 2 at once: distance 0.
  EXPECT_TRUE(trace.reused_within(2, 0));
  trace.advance(kOrder[3]);
  EXPECT_FALSE(trace.reused_within(2, 1000));  // never read again in this micro-batch
}

TEST(BlockTrace, ADepartureStopsFollowingAndIsRecordedAsTheNewOrder) {
  BlockTrace trace = make_trace();
  run_micro_batch(trace, kOrder);
  trace.end_micro_batch();
  const std::vector<BlockEvent> skipped{{false, 0}, {false, 2}, {true, 2}, {true, 0}};  // block 1 dropped
  trace.begin_micro_batch();
  EXPECT_TRUE(trace.advance(skipped[0]));
  EXPECT_FALSE(trace.advance(skipped[1]));
  EXPECT_TRUE(trace.upcoming_units().empty());  // no prefetch off the recorded order
  EXPECT_FALSE(trace.reused_within(0, 1 << 30));
  trace.advance(skipped[2]);
  trace.advance(skipped[3]);
  const uint64_t hash = trace.current_hash();
  EXPECT_TRUE(trace.end_micro_batch());
  EXPECT_EQ(trace.recorded(), skipped);
  run_micro_batch(trace, kOrder);
  EXPECT_NE(trace.current_hash(), hash);
}

TEST(BlockTrace, AShorterMicroBatchIsAChange) {
  BlockTrace trace = make_trace();
  run_micro_batch(trace, kOrder);
  trace.end_micro_batch();
  run_micro_batch(trace, std::vector<BlockEvent>(kOrder.begin(), kOrder.end() - 1));
  EXPECT_TRUE(trace.following());
  EXPECT_TRUE(trace.end_micro_batch());
}

TEST(FetchUnits, ShardRunsCoverEachRanksPartOfItsParameters) {
  FetchUnits units(kNumels, kOwners, 3, 3, /*persistence=*/0, 1 << 30);
  std::vector<std::vector<int64_t>> runs;  // (param, param_offset, shard_offset, length)
  for_each_shard_run(units.units()[0], /*rank=*/2, kNumels, [&](uint32_t param, int64_t p, int64_t s, int64_t n) {
    runs.push_back({param, p, s, n});
  });
  // Rank 2 holds [674, 1011) of unit 0: param 0's [674, 1000), param 1's 10 elements, then 1 of padding.
  EXPECT_EQ(runs, (std::vector<std::vector<int64_t>>{{0, 674, 0, 326}, {1, 0, 326, 10}}));
  EXPECT_EQ(units.largest_shard(), 337);
}

TEST(UnitResidency, GathersReleasesAndGathersAgainInPlace) {
  UnitResidency unit(4);
  EXPECT_TRUE(unit.released());
  unit.begin_gather();
  EXPECT_TRUE(unit.gathering());
  unit.end_gather();
  EXPECT_TRUE(unit.live());
  unit.begin_gather();  // the persistent unit after a step
  unit.end_gather();
  unit.release();
  EXPECT_EQ(unit.state(), Residency::kReleased);
}

TEST(UnitResidency, AnIllegalMoveIsAnInternalErrorNamingTheUnit) {
  UnitResidency unit(4);
  try {
    unit.end_gather();
    FAIL() << "a released unit became live without a gather";
  } catch (const sdk::PluginError& e) {
    EXPECT_EQ(e.code(), ZHOST_ERR_INTERNAL);
    EXPECT_STREQ(e.what(),
                 "stage3: fetch unit 4 cannot become live while released (a bug in stage 3's gather "
                 "bookkeeping)");
  }
  EXPECT_THROW(unit.release(), sdk::PluginError);
  unit.begin_gather();
  EXPECT_THROW(unit.begin_gather(), sdk::PluginError);  // a second gather in flight
  EXPECT_THROW(unit.release(), sdk::PluginError);       // released before its gather completed
  EXPECT_TRUE(unit.gathering());                        // a refused move changes nothing
}

}  // namespace
}  // namespace zhost::stage3
