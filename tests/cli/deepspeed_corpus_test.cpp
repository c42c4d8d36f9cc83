// tests/cli/deepspeed_corpus_test.cpp: the corpus of real DeepSpeed configs (tests/config/deepspeed_corpus)
// checked as `zhost config check` does (prepare_job, then the data and precision checks), in one process
// so that the ~200 files take seconds: each file against its line in EXPECTED, "FILE [--with=K=V ...] [--set=K=V
// ...] accepted" or "FILE [...] refused TEXT", TEXT being part of the first error line. Every file must be
// listed. --with=K=V is the model the file's own training script trains (what a companion TOML or --set gives
// zhost, Note [A DeepSpeed JSON alone]), for a file whose settings name that model's layers: always applied.
// --set=K=V stands for the trainer's arguments that fill a file's HF "auto" values (Note [HF's "auto"]): such a
// file is checked without them too, where its "auto"s take HF Trainer's defaults, which the listed arguments are
// (but bf16 where listed), and must give the same outcome. A second test reports
// the share of the files that need nothing out of scope that are accepted (Note [Corpus share]).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "host/config/schema/validate.hpp"
#include "host/core/error.hpp"
#include "host/engine/engine.hpp"
#include "host/engine/preflight.hpp"
#include "host/job/job_setup.hpp"

namespace fs = std::filesystem;

namespace {

// Empty when the config is accepted, else its error lines (the first one first).
std::vector<std::string> check(const fs::path& file, const std::vector<std::string>& overrides) {
  zhost::JobSetupOptions options;
  options.config_file = file;
  options.overrides = overrides;
  options.plugin_dirs = {ZHOST_PLUGIN_DIR};
  try {
    zhost::JobSetup job = zhost::prepare_job(options);
    zhost::engine::check_data(*job.config);
    zhost::engine::check_precision(*job.config);
    return {};
  } catch (const zhost::config::ConfigErrors& errors) {
    return errors.errors();
  } catch (const zhost::Error& error) {
    return {error.what()};
  }
}

// One line of EXPECTED: FILE [--with=K=V ...] [--set=K=V ...] accepted|refused [TEXT].
struct Expected {
  std::string file, outcome, reason;
  std::vector<std::string> model;      // --with: the model the file's training script trains
  std::vector<std::string> arguments;  // --set: the trainer's arguments that fill its "auto"s
};

std::vector<Expected> read_expected(const fs::path& corpus) {
  std::ifstream expected_file(corpus / "EXPECTED");
  std::vector<Expected> lines;
  for (std::string line; std::getline(expected_file, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    Expected expected;
    fields >> expected.file >> expected.outcome;
    for (const std::string prefix = "--with="; expected.outcome.rfind(prefix, 0) == 0; fields >> expected.outcome) {
      expected.model.push_back(expected.outcome.substr(prefix.size()));
    }
    for (const std::string prefix = "--set="; expected.outcome.rfind(prefix, 0) == 0; fields >> expected.outcome) {
      expected.arguments.push_back(expected.outcome.substr(prefix.size()));
    }
    std::getline(fields, expected.reason);
    expected.reason.erase(0, std::min(expected.reason.size(), expected.reason.find_first_not_of(' ')));
    lines.push_back(std::move(expected));
  }
  return lines;
}

constexpr const char* kAutoUnfilled = "\"auto\" is filled in from the trainer's arguments, and none gives it here";

TEST(DeepSpeedCorpus, EachRealConfigGivesItsExpectedOutcome) {
  spdlog::set_level(spdlog::level::off);
  zhost::engine::register_builtin_plugins();
  const fs::path corpus = fs::path(ZHOST_SOURCE_DIR) / "tests/config/deepspeed_corpus";
  ASSERT_TRUE(fs::exists(corpus / "EXPECTED")) << "missing " << (corpus / "EXPECTED");
  std::vector<std::string> listed;
  size_t accepted = 0, refused = 0, with_arguments = 0;
  for (const Expected& line : read_expected(corpus)) {
    const std::string& file = line.file;
    const std::string& outcome = line.outcome;
    const std::string& reason = line.reason;
    const std::vector<std::string>& arguments = line.arguments;
    listed.push_back(file);
    if (!arguments.empty()) {
      ++with_arguments;
      const std::vector<std::string> unfilled = check(corpus / file, line.model);
      EXPECT_TRUE(std::none_of(unfilled.begin(), unfilled.end(),
                               [](const std::string& e) { return e.find(kAutoUnfilled) != std::string::npos; }))
          << file << ": without the trainer's arguments its \"auto\"s take HF Trainer's defaults";
      const std::string first = unfilled.empty() ? "" : unfilled.front();
      if (outcome == "accepted")
        EXPECT_EQ(first, "") << file << " without the trainer's arguments";
      else
        EXPECT_NE(first.find(reason), std::string::npos) << file << " without the trainer's arguments: " << first;
    }
    std::vector<std::string> overrides = line.model;
    overrides.insert(overrides.end(), arguments.begin(), arguments.end());
    const std::vector<std::string> errors = check(corpus / file, overrides);
    const std::string error = errors.empty() ? "" : errors.front();
    // Each file's outcome in the log, for reviewing EXPECTED after a change.
    std::printf("OUTCOME\t%s\t%s\n", file.c_str(), error.c_str());
    if (outcome == "accepted") {
      ++accepted;
      EXPECT_EQ(error, "") << file;
    } else {
      ++refused;
      EXPECT_EQ(outcome, "refused") << file;
      EXPECT_FALSE(reason.empty()) << file;
      EXPECT_NE(error.find(reason), std::string::npos) << file << ": expected '" << reason << "' in: " << error;
    }
  }
  std::vector<std::string> present;
  for (const auto& entry : fs::recursive_directory_iterator(corpus)) {
    if (entry.path().extension() == ".json") present.push_back(fs::relative(entry.path(), corpus).string());
  }
  std::sort(present.begin(), present.end());
  std::sort(listed.begin(), listed.end());
  EXPECT_EQ(present, listed);
  std::printf("DeepSpeed corpus: %zu files, %zu accepted, %zu refused; %zu checked with the trainer's arguments\n",
              listed.size(), accepted, refused, with_arguments);
}

// Note [Corpus share]: the figure issue #41 asks for, the share of the corpus's configs that need nothing
// out of scope that `config check` accepts. A refused file is classed by every error line it gets, not only
// the first: out of scope when any line names a feature the issue leaves out (model and sequence
// parallelism, 1-bit and 0/1 optimizers, curriculum learning, DeepCompile, MoQ); otherwise "DeepSpeed
// refuses it too" when any line is a refusal DeepSpeed 0.19.8 makes as well (such a file runs nowhere as
// written); otherwise in scope: a gap of zhost's, which counts against the share. The share is accepted /
// (accepted + in scope), per project (a file's first folder) and overall; the test fails when the overall
// share falls below kShareFloor, the figure the corpus reached (SOURCES.md gives it with the reasons left).
// The test prints each refused file's class ("SCOPE\t<class> (<reason>)\t<file>");
// Peer.CorpusRefusalsDeepSpeedMakesToo reads those lines and checks every "DeepSpeed refuses it too" against
// DeepSpeed 0.19.8 itself, by the reason's text (tests/peer/corpus_refusals.py).
struct Reason {
  const char* text;  // part of an error line
  const char* what;  // the class's reason, for the log
};

constexpr Reason kOutOfScope[] = {
    {"tensor parallelism (AutoTP)", "model parallelism"},
    {"partition_activations = true is not supported", "model parallelism (activations of model-parallel ranks)"},
    {"sequence parallelism", "sequence parallelism"},
    {"optimizer.type = \"OneBitAdam\"", "1-bit optimizers"},
    {"optimizer.type = \"OnebitAdam\"", "1-bit optimizers"},
    {"optimizer.type = \"OneBitLamb\"", "1-bit optimizers"},
    {"optimizer.type = \"ZeroOneAdam\"", "0/1 Adam"},
    {"curriculum learning is a feature", "curriculum learning"},
    {"DeepCompile is a feature", "DeepCompile"},
    {"quantization-aware training is a feature", "MoQ"},
};

constexpr Reason kDeepSpeedRefuses[] = {
    {"the file sets neither train_batch_size nor train_micro_batch_size_per_gpu", "no batch size"},
    {"not valid JSON", "a template that a script fills in"},
    {"is not a DeepSpeed key in fp16", "DeepSpeed's fp16 table forbids other keys"},
    {"clipping inside the optimizer", "DeepSpeed raises on optimizer.params.max_grad_norm"},
    {"DeepSpeed 0.19.8 refuses it too", "a feature DeepSpeed removed"},  // Note [Features DeepSpeed removed]
};

// The overall share reached (Note [Corpus share]); raise it when a fix lets more files through.
constexpr double kShareFloor = 0.99;

const Reason* find_reason(const std::vector<std::string>& errors, const Reason* begin, const Reason* end) {
  for (const std::string& error : errors) {
    for (const Reason* reason = begin; reason != end; ++reason) {
      if (error.find(reason->text) != std::string::npos) return reason;
    }
  }
  return nullptr;
}

TEST(DeepSpeedCorpus, ShareOfInScopeConfigsAcceptedStaysAboveItsFloor) {
  spdlog::set_level(spdlog::level::off);
  zhost::engine::register_builtin_plugins();
  const fs::path corpus = fs::path(ZHOST_SOURCE_DIR) / "tests/config/deepspeed_corpus";
  struct Counts {
    size_t accepted = 0, in_scope = 0, out_of_scope = 0, deepspeed_refuses = 0;
  };
  std::map<std::string, Counts> by_project;
  std::map<std::string, size_t> in_scope_reasons;
  for (const Expected& line : read_expected(corpus)) {
    std::vector<std::string> overrides = line.model;
    overrides.insert(overrides.end(), line.arguments.begin(), line.arguments.end());
    const std::vector<std::string> errors = check(corpus / line.file, overrides);
    Counts& counts = by_project[line.file.substr(0, line.file.find('/'))];
    if (errors.empty()) {
      ++counts.accepted;
    } else if (const Reason* out = find_reason(errors, std::begin(kOutOfScope), std::end(kOutOfScope))) {
      ++counts.out_of_scope;
      std::printf("SCOPE\tout of scope (%s)\t%s\n", out->what, line.file.c_str());
    } else if (const Reason* ds = find_reason(errors, std::begin(kDeepSpeedRefuses), std::end(kDeepSpeedRefuses))) {
      ++counts.deepspeed_refuses;
      std::printf("SCOPE\tDeepSpeed refuses it too (%s)\t%s\n", ds->what, line.file.c_str());
    } else {
      ++counts.in_scope;
      // The first error without its file:line:column, cut before the value's details.
      std::string first = errors.front();
      if (first.rfind(corpus.string(), 0) == 0) first.erase(0, std::min(first.size(), first.find(": ") + 2));
      std::printf("SCOPE\tin scope\t%s\t%s\n", line.file.c_str(), first.c_str());
      ++in_scope_reasons[first.substr(0, std::min(first.find(" = "), first.find(": ")))];
    }
  }
  Counts total;
  const auto share = [](const Counts& c) {
    return c.accepted + c.in_scope == 0 ? 1.0 : double(c.accepted) / double(c.accepted + c.in_scope);
  };
  std::printf("%-20s %8s %8s %12s %10s  %s\n", "project", "accepted", "in scope", "out of scope", "DS refuses",
              "share (accepted of those needing nothing out of scope)");
  for (const auto& [project, c] : by_project) {
    const std::string figure = c.accepted + c.in_scope == 0 ? std::string("none needs only what is in scope")
                                                            : fmt::format("{}/{} = {:.0f}%", c.accepted,
                                                                          c.accepted + c.in_scope, 100 * share(c));
    std::printf("%-20s %8zu %8zu %12zu %10zu  %s\n", project.c_str(), c.accepted, c.in_scope, c.out_of_scope,
                c.deepspeed_refuses, figure.c_str());
    total.accepted += c.accepted;
    total.in_scope += c.in_scope;
    total.out_of_scope += c.out_of_scope;
    total.deepspeed_refuses += c.deepspeed_refuses;
  }
  std::printf("%-20s %8zu %8zu %12zu %10zu  %zu/%zu = %.1f%%\n", "overall", total.accepted, total.in_scope,
              total.out_of_scope, total.deepspeed_refuses, total.accepted, total.accepted + total.in_scope,
              100 * share(total));
  for (const auto& [reason, count] : in_scope_reasons)
    std::printf("in scope, refused: %zu x %s\n", count, reason.c_str());
  EXPECT_GE(share(total), kShareFloor) << "fewer of the corpus's in-scope configs are accepted than before";
}

}  // namespace
