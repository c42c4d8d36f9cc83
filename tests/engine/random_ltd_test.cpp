// tests/engine/random_ltd_test.cpp: Note [Random-LTD]'s parts on their own: DeepSpeed's fixed_linear schedule, the
// draw of the kept tokens (sorted, distinct, in range, a function of its key, uniform), and a block run on the kept
// tokens only (the others untouched in value and in gradient).
#include "host/engine/random_ltd.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <set>
#include <vector>

namespace zhost::engine {
namespace {

// DeepSpeed's gpt_medium random-LTD example: min 128, max 1024, require_steps 400, seq_per_step 8. Expected values
// from DeepSpeed's __fixed_root_get_value(global_steps = step - 1, root_degree 1), worked by hand:
// floor(g / 400 * 896 + 128), less its remainder mod 8, at most 1024.
TEST(RandomLtdSchedule, IsDeepSpeedsFixedLinear) {
  RandomLtdSpec spec;
  spec.layers = {1, 2};
  spec.min_tokens = 128;
  spec.max_tokens = 1024;
  spec.require_steps = 400;
  spec.tokens_per_increase = 8;
  EXPECT_EQ(random_ltd_tokens(spec, 1), 128);     // g 0: 128
  EXPECT_EQ(random_ltd_tokens(spec, 4), 128);     // g 3: floor(134.72) = 134 -> 128
  EXPECT_EQ(random_ltd_tokens(spec, 6), 136);     // g 5: floor(139.2) = 139 -> 136
  EXPECT_EQ(random_ltd_tokens(spec, 101), 352);   // g 100: 224 + 128
  EXPECT_EQ(random_ltd_tokens(spec, 400), 1016);  // g 399: floor(1021.76) = 1021 -> 1016
  EXPECT_EQ(random_ltd_tokens(spec, 401), 1024);
  EXPECT_EQ(random_ltd_tokens(spec, 5000), 1024);  // capped at max
  spec.min_tokens = 30;  // a start that is not a multiple: rounded down at once, as DeepSpeed's first update does
  EXPECT_EQ(random_ltd_tokens(spec, 1), 24);
}

TEST(RandomLtdPositions, SortedDistinctInRangeAndAFunctionOfTheKey) {
  const at::Tensor a = random_ltd_positions(42, 3, 20, 7);
  ASSERT_EQ(a.sizes(), (at::IntArrayRef{3, 7}));
  EXPECT_EQ(a.scalar_type(), at::kLong);
  for (int64_t row = 0; row < 3; ++row) {
    std::set<int64_t> seen;
    for (int64_t i = 0; i < 7; ++i) {
      const int64_t p = a[row][i].item<int64_t>();
      EXPECT_GE(p, 0);
      EXPECT_LT(p, 20);
      if (i > 0) EXPECT_GT(p, a[row][i - 1].item<int64_t>());
      seen.insert(p);
    }
    EXPECT_EQ(seen.size(), 7u);
  }
  EXPECT_TRUE(at::equal(a, random_ltd_positions(42, 3, 20, 7)));
  EXPECT_FALSE(at::equal(a, random_ltd_positions(43, 3, 20, 7)));
  EXPECT_FALSE(at::equal(a[0], a[1]));  // each sample draws its own
}

// Uniform without replacement: over 4000 draws of 8 of 32 positions, each position is kept a quarter of the time
// (expected 1000, standard deviation ~27: 6 of them allowed).
TEST(RandomLtdPositions, EveryPositionIsKeptAlike) {
  const at::Tensor drawn = random_ltd_positions(7, 4000, 32, 8);
  const at::Tensor per_position = at::bincount(drawn.reshape({-1}), {}, 32);
  for (int64_t p = 0; p < 32; ++p) EXPECT_NEAR(per_position[p].item<int64_t>(), 1000, 160) << "position " << p;
}

// The tokens not kept leave unchanged, with the gradient of the identity; the kept ones go through the block.
TEST(RandomLtdRun, OnlyTheKeptTokensGoThroughTheBlock) {
  const at::Tensor x = at::randn({2, 6, 3}, at::kDouble).requires_grad_(true);
  const at::Tensor positions = at::tensor({1, 4, 2, 5}, at::kLong).reshape({2, 2});
  int64_t seen_tokens = 0;
  const at::Tensor y = run_on_kept_tokens(x, positions, [&](const at::Tensor& kept) {
    seen_tokens = kept.size(1);
    return kept * 3.0;
  });
  EXPECT_EQ(seen_tokens, 2);
  y.sum().backward();
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < 6; ++t) {
      const bool kept = (b == 0 && (t == 1 || t == 4)) || (b == 1 && (t == 2 || t == 5));
      const double factor = kept ? 3.0 : 1.0;
      EXPECT_TRUE(at::allclose(y[b][t], x[b][t] * factor)) << b << ", " << t;
      EXPECT_TRUE(at::allclose(x.grad()[b][t], at::full({3}, factor, at::kDouble))) << b << ", " << t;
    }
}

}  // namespace
}  // namespace zhost::engine
