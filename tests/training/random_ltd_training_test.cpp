// tests/training/random_ltd_training_test.cpp: random-LTD (Note [Random-LTD]) through the real zhost executable: it
// changes the job and reproduces it bit for bit; activation checkpointing recomputes a layer on the tokens it kept;
// ZeRO stages 2 and 3 train the same bits as stage 0 with it; a resumed job draws the tokens the uninterrupted one
// drew; DeepSpeed's data_efficiency.random_ltd in a JSON trains; a rotary model is refused.
#include <gtest/gtest.h>

#include <string>

#include "tests/support/scratch_dir.hpp"
#include "tests/training/training_test_support.hpp"

using namespace zhost::testing;

namespace {

// 12 steps of a 4-layer gpt on 32 tokens; layers 1 and 2 keep 8 tokens at step 1, rising by 8 to all 32 at step 10
// (min 8, max 32, require_steps 9: k = 8 + (s-1) * 24 / 9 rounded down to a multiple of 8; step 5: 16).
const char* kJob =
    "--set steps=12 --set model.layers=4 --set model.seq_len=32 --set train_micro_batch_size_per_gpu=2 "
    "--set checkpoint.interval=6";
const char* kLtd =
    " --set random_ltd.layers=[1,2] --set random_ltd.min_tokens=8 --set random_ltd.max_tokens=32 "
    "--set random_ltd.require_steps=9 --set random_ltd.tokens_per_increase=8";

RunOutput train(const ScratchDir& dir, const std::string& name, const std::string& args) {
  RunOutput r = run_zhost(dir.path(), small_job_config(), name, std::string(kJob) + " " + args);
  EXPECT_EQ(r.exit_code, 0) << name << ":\n" << r.err;
  return r;
}

TEST(RandomLtd, ChangesTheJobAndRepeatsItBitForBit) {
  ScratchDir dir;
  RunOutput plain = train(dir, "plain", "--nproc 2");
  RunOutput ltd = train(dir, "ltd", std::string("--nproc 2") + kLtd);
  RunOutput again = train(dir, "again", std::string("--nproc 2") + kLtd);
  ASSERT_EQ(ltd.losses.size(), 12u);
  EXPECT_NE(ltd.err.find("random-LTD: layers 1,2 run on a random 8 of the 32 tokens of each sample at step 1, rising "
                         "to 32 by step 10 (multiples of 8)"),
            std::string::npos)
      << ltd.err;
  EXPECT_NE(ltd.losses, plain.losses);
  EXPECT_EQ(ltd.losses, again.losses);
  EXPECT_EQ(weights_mismatch(ltd, again, 0, 0), "");
  // MFU counts the work done: fewer FLOPs per token while the layers keep fewer tokens, the model's once they keep
  // all 32 (step 10 on).
  ASSERT_EQ(ltd.metrics.size(), 12u);
  ASSERT_EQ(plain.metrics.size(), 12u);
  const double full = plain.metrics[0].at("flops_per_token");
  EXPECT_LT(ltd.metrics[0].at("flops_per_token"), ltd.metrics[4].at("flops_per_token"));
  EXPECT_LT(ltd.metrics[4].at("flops_per_token"), full);
  EXPECT_EQ(ltd.metrics[9].at("flops_per_token"), full);
  EXPECT_EQ(plain.metrics[11].at("flops_per_token"), full);
}

// The recomputation of a checkpointed layer runs on the tokens its forward kept: the same bits as without
// checkpointing (a fresh draw in the recomputation would change the gradients).
TEST(RandomLtd, ActivationCheckpointingRecomputesOnTheSameTokens) {
  ScratchDir dir;
  RunOutput plain = train(dir, "plain", std::string("--nproc 1") + kLtd);
  RunOutput checkpointed =
      train(dir, "checkpointed", std::string("--nproc 1") + kLtd + " --set activation_checkpointing.enabled=true");
  EXPECT_EQ(checkpointed.losses, plain.losses);
  EXPECT_EQ(weights_mismatch(checkpointed, plain, 0, 0), "");
}

class RandomLtdStages : public ::testing::TestWithParam<int> {};

INSTANTIATE_TEST_SUITE_P(Stages, RandomLtdStages, ::testing::Values(2, 3),
                         [](const ::testing::TestParamInfo<int>& stage) {
                           return "Stage" + std::to_string(stage.param);
                         });

// ZeRO partitions the states, not the tokens: stage 2 and stage 3 (which gathers each block's parameters for a
// shorter input) train stage 0's bits, and a job resumed at step 6, mid-schedule, trains steps 7-12 as before.
TEST_P(RandomLtdStages, EqualStageZeroAndResumeBitForBit) {
  ScratchDir dir;
  const std::string ltd = std::string("--nproc 2") + kLtd;
  RunOutput stage0 = train(dir, "stage0", ltd);
  const std::string zero = ltd + " --set zero.stage=" + std::to_string(GetParam());
  RunOutput staged = train(dir, "staged", zero + " --set checkpoint.dir=ckpt");
  EXPECT_EQ(staged.losses, stage0.losses);
  EXPECT_EQ(weights_mismatch(staged, stage0, 0, 0), "");
  RunOutput resumed =
      train(dir, "resumed",
            zero + " --set checkpoint.dir=ckpt2 --resume " + (dir.path() / "ckpt" / "step-00000006").string());
  ASSERT_EQ(resumed.losses.size(), 6u);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(resumed.losses[i], staged.losses[i + 6]) << "step " << i + 7;
  EXPECT_EQ(weights_mismatch(resumed, staged, 0, 0), "");
}

// DeepSpeed's data_efficiency.data_routing.random_ltd, as its gpt example writes it (scaled to this model), trains
// with zhost's random_ltd; llama's rotary positions are refused in one line.
TEST(RandomLtd, DeepSpeedsTableTrainsAndRotaryModelsAreRefused) {
  ScratchDir dir;
  dir.write("ds.json", R"({"train_micro_batch_size_per_gpu": 2, "gradient_clipping": 0.5,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
  "data_efficiency": {"enabled": true, "seed": 1234, "data_routing": {"enabled": true, "random_ltd": {
    "enabled": true, "total_layer_num": 4, "random_ltd_layer_num": 2, "random_ltd_layer_id": [1, 2],
    "model_mask_name": "attention_mask", "model_type": "decoder", "hidden_state_order": "batch_seq_dim",
    "random_ltd_schedule": {"min_value": 8, "max_value": 32, "schedule_type": "fixed_linear",
      "schedule_config": {"require_steps": 9, "seq_per_step": 8}}}}}})");
  const std::string model = "--nproc 2 --set steps=3 --set model.layers=4 --set model.seq_len=32 --set seed=7";
  RunOutput json = run_zhost_file(dir.path(), dir.path() / "ds.json", "json", model);
  ASSERT_EQ(json.exit_code, 0) << json.err;
  EXPECT_NE(json.err.find("random-LTD: layers 1,2 run on a random 8 of the 32 tokens"), std::string::npos) << json.err;

  RunOutput llama =
      run_zhost(dir.path(), small_job_config(), "llama", std::string(kJob) + kLtd + " --set model.type=llama");
  EXPECT_EQ(llama.exit_code, 2);
  EXPECT_NE(llama.err.find("model.type = \"llama\" computes rotary positions in every layer"), std::string::npos)
      << llama.err;
}

}  // namespace
