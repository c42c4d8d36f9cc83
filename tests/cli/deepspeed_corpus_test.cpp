// tests/cli/deepspeed_corpus_test.cpp: the corpus of real DeepSpeed configs (tests/config/deepspeed_corpus)
// checked as `zhost config check` does (prepare_job, then the data and precision checks), in one process
// so that 120 files take seconds: each file against its line in EXPECTED, "FILE [--set=K=V ...] accepted"
// or "FILE [--set=K=V ...] refused TEXT", TEXT being part of the first error line. Every file must be
// listed. --set=K=V stands for the trainer's arguments that fill a file's HF "auto" values (Note [HF's
// "auto"]): such a file is checked without them too, where its "auto"s take HF Trainer's defaults, which
// the listed arguments are (but bf16 where listed), and must give the same outcome.
#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "host/config/validate.hpp"
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

constexpr const char* kAutoUnfilled = "\"auto\" is filled in from the trainer's arguments, and none gives it here";

TEST(DeepSpeedCorpus, EachRealConfigGivesItsExpectedOutcome) {
  spdlog::set_level(spdlog::level::off);
  zhost::engine::register_builtin_plugins();
  const fs::path corpus = fs::path(ZHOST_SOURCE_DIR) / "tests/config/deepspeed_corpus";
  std::ifstream expected_file(corpus / "EXPECTED");
  ASSERT_TRUE(expected_file) << "missing " << (corpus / "EXPECTED");
  std::vector<std::string> listed;
  size_t accepted = 0, refused = 0, with_arguments = 0;
  for (std::string line; std::getline(expected_file, line);) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    std::string file, outcome, reason;
    std::vector<std::string> arguments;
    fields >> file >> outcome;
    for (const std::string prefix = "--set="; outcome.rfind(prefix, 0) == 0; fields >> outcome) {
      arguments.push_back(outcome.substr(prefix.size()));
    }
    std::getline(fields, reason);
    reason.erase(0, std::min(reason.size(), reason.find_first_not_of(' ')));
    listed.push_back(file);
    if (!arguments.empty()) {
      ++with_arguments;
      const std::vector<std::string> unfilled = check(corpus / file, {});
      EXPECT_TRUE(std::none_of(unfilled.begin(), unfilled.end(),
                               [](const std::string& e) { return e.find(kAutoUnfilled) != std::string::npos; }))
          << file << ": without the trainer's arguments its \"auto\"s take HF Trainer's defaults";
      const std::string first = unfilled.empty() ? "" : unfilled.front();
      if (outcome == "accepted")
        EXPECT_EQ(first, "") << file << " without the trainer's arguments";
      else
        EXPECT_NE(first.find(reason), std::string::npos) << file << " without the trainer's arguments: " << first;
    }
    const std::vector<std::string> errors = check(corpus / file, arguments);
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

}  // namespace
