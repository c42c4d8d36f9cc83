// tests/config/batch_test.cpp: DeepSpeed's batch arithmetic and its error messages.
#include "host/config/schema/batch.hpp"

#include "config_test_support.hpp"

namespace zhost::config {
namespace {

using test_support::usage_error_of;
constexpr std::nullopt_t kUnset = std::nullopt;

void expect_sizes(const BatchSizes& sizes, int64_t train, int64_t micro, int64_t steps) {
  EXPECT_EQ(sizes.train_batch_size, train);
  EXPECT_EQ(sizes.micro_batch_per_gpu, micro);
  EXPECT_EQ(sizes.gradient_accumulation_steps, steps);
}

TEST(BatchSizes, AllThreeConsistent) { expect_sizes(resolve_batch_sizes(32, 4, 2, 4), 32, 4, 2); }

TEST(BatchSizes, TrainAndMicroDeriveAccumulation) { expect_sizes(resolve_batch_sizes(32, 4, kUnset, 2), 32, 4, 4); }

TEST(BatchSizes, TrainAndAccumulationDeriveMicro) { expect_sizes(resolve_batch_sizes(32, kUnset, 2, 4), 32, 4, 2); }

TEST(BatchSizes, MicroAndAccumulationDeriveTrain) { expect_sizes(resolve_batch_sizes(kUnset, 4, 3, 2), 24, 4, 3); }

TEST(BatchSizes, OnlyMicroMeansNoAccumulation) { expect_sizes(resolve_batch_sizes(kUnset, 8, kUnset, 4), 32, 8, 1); }

TEST(BatchSizes, OnlyTrainMeansNoAccumulation) { expect_sizes(resolve_batch_sizes(64, kUnset, kUnset, 8), 64, 8, 1); }

TEST(BatchSizes, OnlyAccumulationMeansMicroOne) { expect_sizes(resolve_batch_sizes(kUnset, kUnset, 4, 2), 8, 1, 4); }

TEST(BatchSizes, NothingGivenMeansOnePerRank) { expect_sizes(resolve_batch_sizes(kUnset, kUnset, kUnset, 3), 3, 1, 1); }

TEST(BatchSizes, InconsistentTripleSaysWhatToChange) {
  EXPECT_EQ(usage_error_of([] { resolve_batch_sizes(32, 4, 2, 2); }),
            "train_batch_size = 32 does not match train_micro_batch_size_per_gpu * gradient_accumulation_steps * "
            "world_size = 4 * 2 * 2 = 16 (train_batch_size = train_micro_batch_size_per_gpu * "
            "gradient_accumulation_steps * world_size); set train_batch_size to 16 or remove it, or change "
            "train_micro_batch_size_per_gpu or gradient_accumulation_steps");
}

TEST(BatchSizes, IndivisibleTrainBatchSaysWhatToChange) {
  EXPECT_EQ(usage_error_of([] { resolve_batch_sizes(30, 4, kUnset, 2); }),
            "train_batch_size = 30 is not a multiple of train_micro_batch_size_per_gpu * world_size = 4 * 2 = 8, so "
            "gradient_accumulation_steps would be 30 / 8 = 3.75 (train_batch_size = train_micro_batch_size_per_gpu * "
            "gradient_accumulation_steps * world_size); set train_batch_size to 24 or 32, or change "
            "train_micro_batch_size_per_gpu");
  EXPECT_EQ(usage_error_of([] { resolve_batch_sizes(10, kUnset, kUnset, 4); }),
            "train_batch_size = 10 is not a multiple of gradient_accumulation_steps (not set, so 1) * world_size = "
            "1 * 4 = 4, so train_micro_batch_size_per_gpu would be 10 / 4 = 2.5 (train_batch_size = "
            "train_micro_batch_size_per_gpu * gradient_accumulation_steps * world_size); set train_batch_size to 8 "
            "or 12, or change train_micro_batch_size_per_gpu");
}

TEST(BatchSizes, TrainBatchSmallerThanOneStepSuggestsTheSmallestValid) {
  EXPECT_EQ(usage_error_of([] { resolve_batch_sizes(4, kUnset, 2, 4); }),
            "train_batch_size = 4 is not a multiple of gradient_accumulation_steps * world_size = 2 * 4 = 8, so "
            "train_micro_batch_size_per_gpu would be 4 / 8 = 0.5 (train_batch_size = train_micro_batch_size_per_gpu * "
            "gradient_accumulation_steps * world_size); set train_batch_size to 8, or change "
            "gradient_accumulation_steps");
}

TEST(BatchSizes, ZeroOrNegativeSizesAreRejected) {
  EXPECT_EQ(usage_error_of([] { resolve_batch_sizes(0, kUnset, kUnset, 1); }),
            "train_batch_size = 0 must be at least 1; set it to a positive number, or remove it to have it derived "
            "(train_batch_size = train_micro_batch_size_per_gpu * gradient_accumulation_steps * world_size)");
  EXPECT_TRUE(test_support::contains(usage_error_of([] { resolve_batch_sizes(kUnset, -2, kUnset, 1); }),
                                     "train_micro_batch_size_per_gpu = -2 must be at least 1"));
  EXPECT_TRUE(test_support::contains(usage_error_of([] { resolve_batch_sizes(kUnset, kUnset, 0, 1); }),
                                     "gradient_accumulation_steps = 0 must be at least 1"));
}

TEST(BatchSizes, BadWorldSizeIsABug) {
  try {
    resolve_batch_sizes(kUnset, kUnset, kUnset, 0);
    ADD_FAILURE() << "world size 0 was accepted";
  } catch (const UsageError&) {
    ADD_FAILURE() << "a bad world size is a zhost bug, not a usage error";
  } catch (const Error&) {
  }
}

TEST(BatchSizes, OverflowIsReported) {
  EXPECT_TRUE(test_support::contains(
      usage_error_of([] { resolve_batch_sizes(kUnset, int64_t{1} << 40, int64_t{1} << 30, 1024); }), "overflow"));
}

}  // namespace
}  // namespace zhost::config
