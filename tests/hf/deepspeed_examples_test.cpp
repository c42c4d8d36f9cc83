// tests/hf/deepspeed_examples_test.cpp: every DeepSpeed config of examples/deepspeed trains as its README
// says - `zhost run FILE --companion tiny_gpt2.toml --nproc 2` on the folder examples/deepspeed/make-model
// writes - and does what the file asks (the offload tier, stage 3, the NVMe tier, ZeRO++, HF's "auto"
// filled). Fewer steps than the README's run, and the NVMe folder in the test's scratch space.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <ostream>
#include <string>
#include <vector>

#include "tests/support/reference_python.hpp"
#include "tests/support/scratch_dir.hpp"
#include "tests/training/training_test_support.hpp"

using namespace zhost::testing;

namespace {

const std::string kExamples = ZHOST_SOURCE_DIR "/examples/deepspeed/";

// The README's model folder, made once by the README's command.
std::string model_folder() {
  static const ScratchDir dir;
  static const bool made = [] {
    const std::string command = kExamples + "make-model " + (dir.path() / "gpt2").string() + " >/dev/null";
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
    return true;
  }();
  (void)made;
  return (dir.path() / "gpt2").string();
}

struct Example {
  const char* file;
  std::vector<std::string> expected;  // lines or fragments the run must print
};

void PrintTo(const Example& e, std::ostream* os) { *os << e.file; }  // test names, not bytes

class DeepSpeedExamples : public ::testing::TestWithParam<Example> {};

INSTANTIATE_TEST_SUITE_P(
    Files, DeepSpeedExamples,
    ::testing::Values(Example{"hf_auto.json",
                              {"took HF Trainer's default: bf16.enabled = false, optimizer.lr = 5e-5",
                               "optimizer offloaded to tier 'offload_cpu'"}},
                      Example{"zero2_offload.json",
                              {"stage 2 via 'stage2', bf16", "optimizer offloaded to tier 'offload_cpu'"}},
                      Example{"zero3_offload.json", {"stage 3 via 'stage3', bf16", "[offload_cpu]"}},
                      Example{"zero3_nvme.json", {"stage 3 via 'stage3', fp32", "[offload_nvme]"}},
                      Example{"zeropp.json", {"stage 3 via 'stage3', bf16", "qwZ (parameter gathers as int8", "hpZ"}}),
    [](const ::testing::TestParamInfo<Example>& e) {
      std::string name = e.param.file;
      name = name.substr(0, name.find('.'));
      std::erase(name, '_');
      return name;
    });

TEST_P(DeepSpeedExamples, TrainsWithTheReadmesCommand) {
  ZHOST_REQUIRE_REFERENCE_PYTHON();
  ScratchDir dir;
  const std::string nvme = (dir.path() / "nvme").string();
  std::filesystem::create_directories(nvme);
  std::string args = "--companion " + kExamples + "tiny_gpt2.toml --nproc 2 --set model.path=" + model_folder() +
                     " --set steps=4 --set steps_per_print=1";
  if (std::string(GetParam().file) == "zero3_nvme.json")
    args += " --set zero.offload_optimizer.nvme_path=" + nvme + " --set zero.offload_param.nvme_path=" + nvme;
  const RunOutput r = run_zhost_file(dir.path(), kExamples + GetParam().file, "example", args);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  ASSERT_EQ(r.losses.size(), 4u) << r.err;
  for (const double loss : r.losses) EXPECT_TRUE(std::isfinite(loss)) << r.err;
  for (const std::string& fragment : GetParam().expected)
    EXPECT_NE(r.err.find(fragment), std::string::npos) << fragment << "\n" << r.err;
}

}  // namespace
