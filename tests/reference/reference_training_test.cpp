// tests/reference/reference_training_test.cpp: the training engine against PyTorch. The real zhost
// executable (host stage 0 partition: gradient hooks, bucketed all-reduce, clipping, AdamW, WarmupLR) trains
// a small gpt for a few steps; reference_train.py trains tests/model/reference_models.py's gpt from the same
// initial weights on the same samples with torch.optim.AdamW, clip_grad_norm_ and DeepSpeed's WarmupLR,
// taking each step's loss over the whole global batch at once. Per step, the loss, the lr and the gradient
// norm must agree, and so must the final weights; on one rank, and on two ranks with gradient accumulation.
// The same against ZeRO-Offload's delayed parameter update (stages 2 and 3, the CPU tier), which
// reference_train.py transcribes from docs/config.md: the plain rule, extrapolation and the lookahead.
//
// The test builds the initial weights with zhost::model::make_model and the batches with
// zhost::data::DataLoader from the same spec and seed as the job's config (both are deterministic from
// them), so zhost itself needs no option to export them.
//
// Python: tests/support/reference_python.hpp (the project's venv, torch 2.11).
#include <ATen/core/Tensor.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "host/data/data.hpp"
#include "host/model/model.hpp"
#include "tests/support/reference_python.hpp"
#include "tests/training/training_test_support.hpp"

namespace zhost::testing {
namespace {

namespace fs = std::filesystem;

// The job both sides train. fp32 on the CPU; hyperparameters away from their defaults so that each one
// has to reach the optimizer.
constexpr uint64_t kSeed = 11;
constexpr double kLr = 0.01;            // the optimizer's lr and WarmupLR's warmup_max_lr
constexpr double kWarmupMinLr = 0.002;  // nonzero, so that steps 1 and 2 (both at the min lr) move weights
constexpr int64_t kWarmupSteps = 3;     // log warmup: step 3 uses an intermediate lr, step 4 the max
constexpr double kBeta1 = 0.85;
constexpr double kBeta2 = 0.99;
constexpr double kEps = 1e-8;
constexpr double kWeightDecay = 0.1;
constexpr double kGradientClipping = 0.3;  // below the gradient norms of this job: clipping acts (checked)
constexpr const char* kTextCorpus = "/usr/share/common-licenses";

// Per step: zhost's loss (the mean over ranks of the mean over micro-batches) within 1e-5 of PyTorch's
// (one mean over the global batch); its gradient norm before clipping likewise. The two differ only in
// fp32 summation order, of the samples as of every kernel.
constexpr double kLossTolerance = 1e-5;
constexpr double kGradNormTolerance = 1e-5;
// Both sides compute the lr in double from the same formula.
constexpr double kLrTolerance = 1e-12;
// Final weights: every weight within kWeightRelative of its tensor's largest magnitude plus kWeightAbsolute.
// Adam divides by sqrt(v), so gradients that agree to fp32 rounding give updates that agree to about 1e-6
// of the lr; after a few steps at lr <= 0.01 and weights of order 0.1 that is well inside 2e-5 relative.
// The absolute term is for the attention key biases: their gradient is zero in exact arithmetic (softmax
// ignores a constant added to every score of a row), so on each side it is independent rounding noise,
// which Adam's normalisation turns into updates of up to a few 1e-6. A wrong lr, clip, decay or beta moves
// weights by 1e-4 and more (lr * 1e-2), far outside.
constexpr double kWeightRelative = 2e-5;
constexpr double kWeightAbsolute = 5e-6;

model::ModelSpec job_model_spec() {
  model::ModelSpec spec;
  spec.type = "gpt";
  spec.layers = 2;
  spec.heads = 2;
  spec.width = 32;
  spec.vocab = 256;
  spec.seq_len = 16;
  spec.seed = kSeed;
  return spec;
}

// How the job's global batch is laid out over ranks and micro-steps.
struct Layout {
  const char* name;
  int64_t steps;
  int ranks;
  int64_t micro_batch;
  int64_t accumulation;
};

std::ostream& operator<<(std::ostream& out, const Layout& layout) { return out << layout.name; }

std::string job_config(const Layout& layout) {
  const model::ModelSpec spec = job_model_spec();
  return fmt::format(R"(steps = {steps}
seed = {seed}
steps_per_print = 1
gradient_clipping = {clip}
train_micro_batch_size_per_gpu = {micro}
gradient_accumulation_steps = {accumulation}
[model]
type = "{type}"
layers = {layers}
heads = {heads}
width = {width}
vocab = {vocab}
seq_len = {seq_len}
init_std = {init_std}
[data]
type = "text"
path = "{corpus}"
[optimizer]
type = "AdamW"
lr = {lr}
betas = [{beta1}, {beta2}]
eps = {eps}
weight_decay = {weight_decay}
[scheduler]
type = "WarmupLR"
warmup_min_lr = {min_lr}
warmup_max_lr = {lr}
warmup_num_steps = {warmup_steps}
warmup_type = "log"
[run]
device = "cpu"
save_final_weights = true
[comm]
timeout_s = 60
)",
                     fmt::arg("steps", layout.steps), fmt::arg("seed", kSeed), fmt::arg("clip", kGradientClipping),
                     fmt::arg("micro", layout.micro_batch), fmt::arg("accumulation", layout.accumulation),
                     fmt::arg("type", spec.type), fmt::arg("layers", spec.layers), fmt::arg("heads", spec.heads),
                     fmt::arg("width", spec.width), fmt::arg("vocab", spec.vocab), fmt::arg("seq_len", spec.seq_len),
                     fmt::arg("init_std", spec.init_std), fmt::arg("corpus", kTextCorpus), fmt::arg("lr", kLr),
                     fmt::arg("beta1", kBeta1), fmt::arg("beta2", kBeta2), fmt::arg("eps", kEps),
                     fmt::arg("weight_decay", kWeightDecay), fmt::arg("min_lr", kWarmupMinLr),
                     fmt::arg("warmup_steps", kWarmupSteps));
}

std::string python_executable() { return reference_python(); }

std::string read_text(const fs::path& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Writes `tensor` (CPU, any dtype) as raw bytes to folder/file and returns the manifest entry that
// reference_models.read_raw reads.
nlohmann::json write_raw(const fs::path& folder, const std::string& file, const at::Tensor& tensor) {
  const at::Tensor data = tensor.detach().contiguous();
  std::ofstream(folder / file, std::ios::binary)
      .write(static_cast<const char*>(data.data_ptr()), static_cast<std::streamsize>(data.nbytes()));
  return {{"file", file}, {"shape", data.sizes().vec()}};
}

std::vector<float> read_floats(const fs::path& file, size_t count) {
  std::vector<float> values(count);
  std::ifstream in(file, std::ios::binary);
  in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(count * sizeof(float)));
  EXPECT_TRUE(in.good()) << "cannot read " << count << " floats from " << file;
  return values;
}

// Writes manifest.json and its files for reference_train.py: the initial weights, each step's batches as
// the ranks read them, the hyperparameters, and `delayed_update` when it is not null. Returns the parameter
// names in registry order.
std::vector<std::string> write_reference_inputs(const fs::path& folder, const Layout& layout,
                                                const nlohmann::json& delayed_update = nullptr) {
  nlohmann::json manifest;
  const auto model = model::make_model(job_model_spec());
  const model::ModelSpec& spec = model->spec();
  manifest["spec"] = {{"type", spec.type},      {"layers", spec.layers},       {"heads", spec.heads},
                      {"width", spec.width},    {"ffn_width", spec.ffn_width}, {"vocab", spec.vocab},
                      {"seq_len", spec.seq_len}};
  std::vector<std::string> names;
  for (size_t i = 0; i < model->parameters().size(); ++i) {
    const model::ParamEntry& param = model->parameters()[i];
    nlohmann::json entry = write_raw(folder, "param" + std::to_string(i) + ".bin", param.tensor);
    entry["name"] = param.name;
    manifest["params"].push_back(entry);
    names.push_back(param.name);
  }

  std::vector<std::unique_ptr<data::DataLoader>> rank_loaders;
  for (int rank = 0; rank < layout.ranks; ++rank) {
    data::DataSpec data;
    data.source = "text";
    data.path = kTextCorpus;
    data.vocab = spec.vocab;
    data.seq_len = spec.seq_len;
    data.micro_batch = layout.micro_batch;
    data.world_size = layout.ranks;
    data.rank = rank;
    data.seed = kSeed;
    rank_loaders.push_back(std::make_unique<data::DataLoader>(data));
  }
  for (int64_t step = 1; step <= layout.steps; ++step) {
    nlohmann::json batches = nlohmann::json::array();
    for (int64_t micro = 0; micro < layout.accumulation; ++micro) {
      for (int rank = 0; rank < layout.ranks; ++rank) {
        // The engine's step s (counted from 1) reads the loader's step s - 1.
        const data::Batch batch = rank_loaders[static_cast<size_t>(rank)]->next(step - 1, micro);
        const std::string stem = fmt::format("step{}_micro{}_rank{}", step, micro, rank);
        batches.push_back({{"tokens", write_raw(folder, stem + "_tokens.bin", batch.tokens)},
                           {"targets", write_raw(folder, stem + "_targets.bin", batch.targets)}});
      }
    }
    manifest["steps"].push_back({{"batches", batches}});
  }

  manifest["optimizer"] = {{"lr", kLr}, {"betas", {kBeta1, kBeta2}}, {"eps", kEps}, {"weight_decay", kWeightDecay}};
  manifest["scheduler"] = {{"warmup_min_lr", kWarmupMinLr},
                           {"warmup_max_lr", kLr},
                           {"warmup_num_steps", kWarmupSteps},
                           {"warmup_type", "log"}};
  manifest["gradient_clipping"] = kGradientClipping;
  if (!delayed_update.is_null()) manifest["delayed_update"] = delayed_update;
  std::ofstream(folder / "manifest.json") << manifest.dump(1);
  return names;
}

struct ReferenceRun {
  std::vector<double> losses, grad_norms, lrs;  // per step
  RunOutput weights;                            // only .weights is filled, for weights_mismatch()
};

// Runs reference_train.py on the inputs in `folder`; failures are reported through gtest.
ReferenceRun run_reference(const fs::path& folder, const std::vector<std::string>& names,
                           const std::map<std::string, std::vector<float>>& zhost_weights) {
  ReferenceRun run;
  const std::string script = std::string(ZHOST_SOURCE_DIR) + "/tests/reference/reference_train.py";
  const fs::path log = folder / "python.log";
  const std::string command =
      "'" + python_executable() + "' '" + script + "' '" + folder.string() + "' >'" + log.string() + "' 2>&1";
  if (std::system(command.c_str()) != 0) {
    ADD_FAILURE() << command << "\n" << read_text(log);
    return run;
  }
  const auto result = nlohmann::json::parse(read_text(folder / "result.json"));
  run.losses = result["losses"].get<std::vector<double>>();
  run.grad_norms = result["grad_norms"].get<std::vector<double>>();
  run.lrs = result["lrs"].get<std::vector<double>>();
  for (size_t i = 0; i < names.size(); ++i) {
    auto it = zhost_weights.find(names[i]);
    const size_t count = it == zhost_weights.end() ? 0 : it->second.size();
    run.weights.weights[names[i]] = read_floats(folder / "final" / (std::to_string(i) + ".bin"), count);
  }
  return run;
}

// zhost's `run` against reference_train.py on the same job: per step the loss, lr and gradient norm (clipping
// acting), then the final weights.
void expect_matches_reference(const RunOutput& zhost, const Layout& layout,
                              const nlohmann::json& delayed_update = nullptr) {
  ASSERT_EQ(zhost.exit_code, 0) << zhost.err << zhost.out;
  ASSERT_EQ(zhost.metrics.size(), static_cast<size_t>(layout.steps)) << zhost.err;
  const fs::path folder = zhost.run_dir / "reference";
  fs::create_directories(folder);
  const std::vector<std::string> names = write_reference_inputs(folder, layout, delayed_update);
  const ReferenceRun reference = run_reference(folder, names, zhost.weights);
  ASSERT_EQ(reference.losses.size(), static_cast<size_t>(layout.steps));

  for (size_t i = 0; i < reference.losses.size(); ++i) {
    const auto& metrics = zhost.metrics[i];
    EXPECT_NEAR(zhost.losses[i], reference.losses[i], kLossTolerance * reference.losses[i]) << "loss, step " << i + 1;
    EXPECT_NEAR(metrics.at("lr"), reference.lrs[i], kLrTolerance) << "lr, step " << i + 1;
    EXPECT_NEAR(metrics.at("grad_norm"), reference.grad_norms[i], kGradNormTolerance * reference.grad_norms[i])
        << "gradient norm, step " << i + 1;
    EXPECT_GT(reference.grad_norms[i], kGradientClipping) << "step " << i + 1 << " does not exercise clipping";
  }
  EXPECT_EQ(weights_mismatch(zhost, reference.weights, kWeightRelative, kWeightAbsolute), "");
}

class ReferenceTraining : public ::testing::TestWithParam<Layout> {};

INSTANTIATE_TEST_SUITE_P(Layouts, ReferenceTraining,
                         ::testing::Values(Layout{"OneStep", 1, 1, 2, 1}, Layout{"FourSteps", 4, 1, 2, 1},
                                           Layout{"TwoRanksAccumulating", 4, 2, 2, 2}),
                         [](const ::testing::TestParamInfo<Layout>& layout) { return std::string(layout.param.name); });

TEST_P(ReferenceTraining, LossesAndWeightsMatchPyTorch) {
  ZHOST_REQUIRE_REFERENCE_PYTHON();
  const Layout& layout = GetParam();
  ScratchDir dir;
  const RunOutput zhost = run_zhost(dir.path(), job_config(layout), "zhost",
                                    layout.ranks > 1 ? "--nproc " + std::to_string(layout.ranks) : "");
  expect_matches_reference(zhost, layout);
}

// ZeRO-Offload's delayed parameter update (Note [Delayed parameter update]) against reference_train.py's
// transcription of the rule as docs/config.md states it, which steps a master copy with torch.optim.AdamW and
// gives the forward the stale, extrapolated and looked-ahead weights itself: 2 ranks, the CPU tier, 6 steps
// delayed from step S. Each step's loss pins which weights its forward read (a lookahead of the wrong size,
// sign, lr or gradients moves the losses after step S + 1 by far more than the tolerance); the final weights,
// the drained master.
struct DelayedRule {
  const char* name;
  const char* stage;  // zhost's stage settings
  int64_t start;      // S
  double extrapolation, lookahead;
};
void PrintTo(const DelayedRule& rule, std::ostream* os) { *os << rule.name; }

class DelayedUpdateReference : public ::testing::TestWithParam<DelayedRule> {};

INSTANTIATE_TEST_SUITE_P(
    Rules, DelayedUpdateReference,
    ::testing::Values(DelayedRule{"Stage2Plain", "--set zero.stage=2", 2, 0, 0},
                      DelayedRule{"Stage2Extrapolated", "--set zero.stage=2", 2, 1.5, 0},
                      DelayedRule{"Stage2ExtrapolatedLookahead", "--set zero.stage=2", 2, 1.2, 0.1},
                      DelayedRule{"Stage3LookaheadAlone",
                                  "--set zero.stage=3 --set zero.sub_group_size=3000 "
                                  "--set zero.stage3_param_persistence_threshold=40",
                                  3, 0, 0.3}),
    [](const ::testing::TestParamInfo<DelayedRule>& rule) { return std::string(rule.param.name); });

TEST_P(DelayedUpdateReference, LossesAndWeightsMatchPyTorch) {
  ZHOST_REQUIRE_REFERENCE_PYTHON();
  const DelayedRule& rule = GetParam();
  const Layout layout{"Delayed", 6, 2, 2, 1};
  ScratchDir dir;
  const RunOutput zhost =
      run_zhost(dir.path(), job_config(layout), "zhost",
                fmt::format("--nproc 2 {} --set zero.offload_optimizer.device=cpu --set offload_cpu.threads=1 "
                            "--set zero.offload_optimizer.delayed_update=true "
                            "--set zero.offload_optimizer.delayed_update_start_step={} "
                            "--set experimental.delayed_update_extrapolation={} "
                            "--set experimental.delayed_update_lookahead={}",
                            rule.stage, rule.start, rule.extrapolation, rule.lookahead));
  expect_matches_reference(
      zhost, layout,
      {{"start_step", rule.start}, {"extrapolation", rule.extrapolation}, {"lookahead", rule.lookahead}});
}

}  // namespace
}  // namespace zhost::testing
