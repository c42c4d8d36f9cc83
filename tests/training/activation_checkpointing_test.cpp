// tests/training/activation_checkpointing_test.cpp: DeepSpeed's activation-checkpointing refinements
// (Note [Checkpointed block inputs], host/engine/activation_checkpoints.hpp) train to the same bits as plain
// activation checkpointing, and cpu_checkpointing takes the checkpointed inputs off the training device.
//
// cpu_checkpointing runs under debug.deferred_device_copies (every copy as late as its ordering allows:
// an input read before its copy back is ordered would be garbage) and with the immediate copies of CPU jobs.
// A 4-block gpt with 2 micro-batches per step, so that host slots and the contiguous buffer are reused.
// number_checkpoints = 2 checkpoints layers 0 and 2: the others keep their activations.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "training_test_support.hpp"

using namespace zhost::testing;

namespace {

const char* kJob =
    "--set steps=4 --set model.layers=4 --set train_micro_batch_size_per_gpu=2 --set gradient_accumulation_steps=2 "
    "--set activation_checkpointing.enabled=true";
const char* kDeferred = " --set debug.deferred_device_copies=true";

struct Variant {
  const char* name;
  const char* sets;
  bool deferred;
};

TEST(ActivationCheckpointingOptions, TrainToTheBitsOfPlainCheckpointing) {
  const Variant variants[] = {
      {"cpu, deferred copies", " --set activation_checkpointing.cpu_checkpointing=true", true},
      {"cpu, immediate copies", " --set activation_checkpointing.cpu_checkpointing=true", false},
      {"contiguous", " --set activation_checkpointing.contiguous_memory_optimization=true", false},
      {"cpu and contiguous, deferred copies",
       " --set activation_checkpointing.cpu_checkpointing=true"
       " --set activation_checkpointing.contiguous_memory_optimization=true",
       true},
      {"2 of 4 blocks, cpu and contiguous, deferred copies",
       " --set activation_checkpointing.number_checkpoints=2 --set activation_checkpointing.cpu_checkpointing=true"
       " --set activation_checkpointing.contiguous_memory_optimization=true",
       true},
  };
  ScratchDir dir;
  RunOutput plain = run_zhost(dir.path(), small_job_config(), "plain", kJob);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(plain.losses.size(), 4u);
  int index = 0;
  for (const Variant& v : variants) {
    SCOPED_TRACE(v.name);
    RunOutput variant = run_zhost(dir.path(), small_job_config(), "variant" + std::to_string(index++),
                                  std::string(kJob) + v.sets + (v.deferred ? kDeferred : ""));
    ASSERT_EQ(variant.exit_code, 0) << variant.err;
    EXPECT_EQ(variant.losses, plain.losses);
    EXPECT_EQ(weights_mismatch(variant, plain, 0, 0), "");
    EXPECT_EQ(variant.err.find("never completed"), std::string::npos) << variant.err;
  }
}

// The last step's memory category `name` of a run (metrics.jsonl, rank 0).
double last_memory(const RunOutput& r, const std::string& name) {
  std::ifstream in(r.run_dir / "metrics.jsonl");
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  return nlohmann::json::parse(last).at("memory").at(name).get<double>();
}

// Device-side activation memory with cpu_checkpointing: the inputs of every checkpointed block are in host
// memory instead, so `activations` drops by checkpointed blocks x micro-batch x seq_len x width x 4 bytes
// (fp32) and `checkpoints_host` holds exactly that. Here 4 x 2 x 64 x 64 x 4 = 131072 bytes. The contiguous
// buffer on the device holds the same bytes that plain checkpointing keeps, and is counted in
// `activations` though it is allocated before the first forward.
TEST(CpuCheckpointing, MovesEveryCheckpointedInputOffTheDevice) {
  ScratchDir dir;
  const std::string job =
      "--set steps=2 --set model.layers=4 --set model.width=64 --set model.seq_len=64 "
      "--set train_micro_batch_size_per_gpu=2 --set activation_checkpointing.enabled=true";
  const double inputs = 4.0 * 2 * 64 * 64 * 4;
  RunOutput plain = run_zhost(dir.path(), small_job_config(), "plain", job);
  RunOutput cpu = run_zhost(dir.path(), small_job_config(), "cpu",
                            job + " --set activation_checkpointing.cpu_checkpointing=true" + kDeferred);
  RunOutput both = run_zhost(dir.path(), small_job_config(), "both",
                             job +
                                 " --set activation_checkpointing.cpu_checkpointing=true"
                                 " --set activation_checkpointing.contiguous_memory_optimization=true" +
                                 kDeferred);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
  ASSERT_EQ(both.exit_code, 0) << both.err;
  RunOutput contiguous = run_zhost(dir.path(), small_job_config(), "contiguous",
                                   job + " --set activation_checkpointing.contiguous_memory_optimization=true");
  ASSERT_EQ(contiguous.exit_code, 0) << contiguous.err;
  const double on_device = last_memory(plain, "activations");
  std::printf("activations: plain %.0f B, cpu_checkpointing %.0f B (formula: %.0f B fewer); checkpoints_host %.0f B\n",
              on_device, last_memory(cpu, "activations"), inputs, last_memory(cpu, "checkpoints_host"));
  EXPECT_EQ(last_memory(plain, "checkpoints_host"), 0);
  for (const RunOutput* r : {&cpu, &both}) {
    EXPECT_EQ(last_memory(*r, "checkpoints_host"), inputs);
    const double saved = on_device - last_memory(*r, "activations");
    EXPECT_NEAR(saved, inputs, 0.05 * inputs) << "plain " << on_device << " B";
  }
  EXPECT_NEAR(last_memory(contiguous, "activations"), on_device, 0.05 * inputs);
  EXPECT_EQ(last_memory(contiguous, "checkpoints_host"), 0);
}

}  // namespace
