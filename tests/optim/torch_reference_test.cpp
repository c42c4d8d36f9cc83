// tests/optim/torch_reference_test.cpp: zhost's AdamW, Adam and SGD against torch.optim itself. The test
// writes the initial parameter and ten steps of gradients as raw float32 files, runs torch_reference.py
// (tests/support/reference_python.hpp: the project's venv, torch 2.11), and compares parameters and state to
// 1e-6 (max-norm relative error).
#include <ATen/core/Tensor.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <ostream>
#include <string>
#include <vector>

#include "tests/optim/optim_test_support.hpp"
#include "tests/support/reference_python.hpp"
#include "zhost/kit/optimizer.hpp"

namespace zhost::optim {
namespace {

using namespace ::zhost::kit;  // the optimizers and numerics under test are the plugin kit's

constexpr int64_t kNumel = 1001;
constexpr int64_t kSteps = 10;

struct TorchCase {
  std::string name;
  std::string torch_kind;  // what torch_reference.py calls it
  OptimizerSpec spec;
};

void PrintTo(const TorchCase& torch_case, std::ostream* out) { *out << torch_case.name; }

std::vector<TorchCase> torch_cases() {
  OptimizerSpec adamw = OptimizerSpec::defaults(OptimizerKind::kAdamW);
  adamw.lr = 1e-2;
  adamw.weight_decay = 0.1;
  OptimizerSpec adam = OptimizerSpec::defaults(OptimizerKind::kAdam);
  adam.lr = 1e-2;
  adam.weight_decay = 0.1;
  adam.beta2 = 0.98;
  OptimizerSpec sgd_momentum = OptimizerSpec::defaults(OptimizerKind::kSgd);
  sgd_momentum.lr = 0.05;
  sgd_momentum.momentum = 0.9;
  sgd_momentum.weight_decay = 0.01;
  OptimizerSpec sgd_plain = OptimizerSpec::defaults(OptimizerKind::kSgd);
  sgd_plain.lr = 0.1;
  return {{"AdamW", "adamw", adamw},
          {"Adam", "adam", adam},
          {"SgdMomentum", "sgd", sgd_momentum},
          {"SgdPlain", "sgd", sgd_plain}};
}

// Runs `command`, returning its exit status and (in `output`) what it printed on stdout and stderr.
int run_command(const std::string& command, std::string& output) {
  FILE* pipe = popen((command + " 2>&1").c_str(), "r");
  if (pipe == nullptr) return -1;
  char buffer[4096];
  while (size_t read = std::fread(buffer, 1, sizeof(buffer), pipe)) output.append(buffer, read);
  return pclose(pipe);
}

std::string shell_quoted(const std::string& text) { return "'" + text + "'"; }

void write_floats(const std::string& path, const std::vector<float>& values) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(float)));
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

std::vector<double> read_floats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<float> values(static_cast<size_t>(kNumel));
  in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(float)));
  EXPECT_TRUE(in.good()) << "cannot read " << kNumel << " floats from " << path;
  return testing::widen(values);
}

class TorchReferenceTest : public ::testing::TestWithParam<TorchCase> {
 protected:
  void SetUp() override {
    ZHOST_REQUIRE_REFERENCE_PYTHON();
    python_ = ::zhost::testing::reference_python();
    char pattern[] = "/tmp/zhost_optim_torch_XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr) << "mkdtemp failed";
    directory_ = pattern;
  }
  // No std::filesystem here: pip LibTorch 2.x exports its own copy of std::filesystem::remove_all,
  // which interposes on libstdc++'s and crashes.
  void TearDown() override {
    std::string output;
    if (!directory_.empty()) run_command("rm -rf " + shell_quoted(directory_), output);
  }
  std::string file(const std::string& name) const { return directory_ + "/" + name; }

  std::string python_;
  std::string directory_;
};

TEST_P(TorchReferenceTest, MatchesTorchOptimOverTenSteps) {
  const TorchCase& test_case = GetParam();
  const OptimizerSpec& spec = test_case.spec;
  const auto optimizer = make_optimizer(spec);

  const std::vector<float> initial = testing::random_normal(kNumel, 77);
  std::vector<float> all_grads;
  std::vector<double> lrs;
  at::Tensor param = testing::to_tensor(initial);
  OptimizerState state;
  for (int64_t step = 1; step <= kSteps; ++step) {
    const std::vector<float> grad = testing::random_normal(kNumel, static_cast<uint32_t>(500 + step), 0.1f);
    all_grads.insert(all_grads.end(), grad.begin(), grad.end());
    lrs.push_back(testing::test_lr(spec.lr, step));
    optimizer->step(param, testing::to_tensor(grad), state, step, lrs.back());
  }

  write_floats(file("param.bin"), initial);
  write_floats(file("grads.bin"), all_grads);
  std::string lr_list;
  for (const double lr : lrs) lr_list += fmt::format("{}{:.17g}", lr_list.empty() ? "" : ", ", lr);
  std::ofstream(file("spec.json")) << fmt::format(
      R"({{"kind": "{}", "numel": {}, "steps": {}, "lrs": [{}], "betas": [{:.17g}, {:.17g}], )"
      R"("eps": {:.17g}, "weight_decay": {:.17g}, "momentum": {:.17g}}})",
      test_case.torch_kind, kNumel, kSteps, lr_list, spec.beta1, spec.beta2, spec.eps, spec.weight_decay,
      spec.momentum);

  const std::string script = std::string(ZHOST_SOURCE_DIR) + "/tests/optim/torch_reference.py";
  std::string output;
  const std::string command = shell_quoted(python_) + " " + shell_quoted(script) + " " + shell_quoted(directory_);
  ASSERT_EQ(run_command(command, output), 0) << output;

  testing::expect_close(testing::to_doubles(param), read_floats(file("param_out.bin")), 1e-6,
                        test_case.name + " param");
  for (const std::string& name : optimizer->state_names()) {
    testing::expect_close(testing::to_doubles(state.get(name)), read_floats(file(name + ".bin")), 1e-6,
                          test_case.name + " " + name);
  }
}

INSTANTIATE_TEST_SUITE_P(TorchOptim, TorchReferenceTest, ::testing::ValuesIn(torch_cases()),
                         [](const ::testing::TestParamInfo<TorchCase>& param_info) { return param_info.param.name; });

}  // namespace
}  // namespace zhost::optim
