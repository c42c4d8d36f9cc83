// tests/zero/flat_layout_test.cpp: the flat layout of ZeRO stages 1 and 2: padding to equal partitions,
// parameters straddling partitions, and segment lookup over any flat range.
#include "zhost/zero/flat_layout.hpp"

#include <gtest/gtest.h>

using zhost::zero::FlatLayout;
using zhost::zero::Segment;

namespace {

// Every flat index below T maps to exactly one (parameter, offset) across the segments of the range.
void expect_segments_cover(const FlatLayout& layout, int64_t begin, int64_t end) {
  int64_t next = begin;
  for (const Segment& s : layout.segments(begin, end)) {
    EXPECT_EQ(s.flat_offset, next);
    EXPECT_EQ(layout.param_offset(s.param) + s.param_offset, s.flat_offset);
    EXPECT_GT(s.length, 0);
    EXPECT_LE(s.param_offset + s.length, layout.param_numel(s.param));
    next += s.length;
  }
  EXPECT_EQ(next, std::min(end, layout.total()));
}

}  // namespace

TEST(FlatLayout, PadsToEqualPartitions) {
  FlatLayout layout({10, 7, 3}, 3);  // T = 20 -> S = 7, P = 21
  EXPECT_EQ(layout.total(), 20);
  EXPECT_EQ(layout.partition_size(), 7);
  EXPECT_EQ(layout.padded(), 21);
  EXPECT_EQ(layout.owner_of(0), 0);
  EXPECT_EQ(layout.owner_of(6), 0);
  EXPECT_EQ(layout.owner_of(7), 1);
  EXPECT_EQ(layout.owner_of(20), 2);  // the padding element belongs to the last partition
}

TEST(FlatLayout, OneRankOwnsEverything) {
  FlatLayout layout({5, 4}, 1);
  EXPECT_EQ(layout.partition_size(), 9);
  auto pieces = layout.split_by_owner(1);
  ASSERT_EQ(pieces.size(), 1u);
  EXPECT_EQ(pieces[0].flat_offset, 5);
  EXPECT_EQ(pieces[0].length, 4);
}

TEST(FlatLayout, SplitsAParameterAtPartitionBoundaries) {
  FlatLayout layout({10, 7, 3}, 3);        // partitions [0,7) [7,14) [14,21)
  auto pieces = layout.split_by_owner(0);  // flat [0, 10): 7 on rank 0, 3 on rank 1
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].param_offset, 0);
  EXPECT_EQ(pieces[0].length, 7);
  EXPECT_EQ(layout.owner_of(pieces[1].flat_offset), 1);
  EXPECT_EQ(pieces[1].param_offset, 7);
  EXPECT_EQ(pieces[1].length, 3);
  pieces = layout.split_by_owner(1);  // flat [10, 17): 4 on rank 1, 3 on rank 2
  ASSERT_EQ(pieces.size(), 2u);
  EXPECT_EQ(pieces[0].length, 4);
  EXPECT_EQ(pieces[1].flat_offset, 14);
  EXPECT_EQ(pieces[1].param_offset, 4);
}

TEST(FlatLayout, SegmentsCoverAnyRangeAndSkipPadding) {
  FlatLayout layout({10, 0, 7, 3}, 4);  // an empty parameter in the middle; T = 20, S = 5, P = 20
  for (int64_t begin = 0; begin <= 20; ++begin)
    for (int64_t end = begin; end <= 24; ++end) expect_segments_cover(layout, begin, end);
  FlatLayout padded({5}, 3);  // T = 5, S = 2, P = 6: flat 5 is padding
  EXPECT_TRUE(padded.segments(5, 6).empty());
  auto last = padded.segments(4, 6);
  ASSERT_EQ(last.size(), 1u);
  EXPECT_EQ(last[0].length, 1);
}

TEST(FlatLayout, MoreRanksThanElements) {
  FlatLayout layout({2}, 3);  // S = 1: rank 2 owns only padding
  EXPECT_EQ(layout.partition_size(), 1);
  EXPECT_EQ(layout.split_by_owner(0).size(), 2u);
  EXPECT_TRUE(layout.segments(2, 3).empty());
}
