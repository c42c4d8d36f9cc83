// tests/training/training_test_support.cpp: runs the zhost executable and parses its run directory.
#include "training_test_support.hpp"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

namespace fs = std::filesystem;

namespace zhost::testing {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<pid_t> children_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  std::vector<pid_t> pids;
  for (pid_t child; in >> child;) pids.push_back(child);
  return pids;
}

// The rank from the process's name ("zhost rank R", launch::name_this_rank_process); -1 before it has one.
int rank_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  std::getline(in, name);
  constexpr std::string_view kPrefix = "zhost rank ";
  if (name.rfind(kPrefix, 0) != 0) return -1;
  return std::atoi(name.c_str() + kPrefix.size());
}

}  // namespace

BackgroundJob::BackgroundJob(const ScratchDir& dir, int nproc, const std::vector<std::string>& sets)
    : dir_(dir.path()), nproc_(nproc) {
  const fs::path config = dir_ / "long.toml";
  std::ofstream(config) << small_job_config();
  std::vector<std::string> args = {ZHOST_EXE,
                                   "run",
                                   config.string(),
                                   "--nproc",
                                   std::to_string(nproc),
                                   "--set",
                                   "steps=100000",
                                   "--set",
                                   "run.dir=" + (dir_ / "runs").string(),
                                   "--set",
                                   "run.name=long",
                                   "--set",
                                   "train_micro_batch_size_per_gpu=1"};
  for (const std::string& set : sets) args.insert(args.end(), {"--set", set});
  launcher_ = fork();
  if (launcher_ == 0) {
    if (!freopen((dir_ / "err.txt").c_str(), "w", stderr) || !freopen((dir_ / "out.txt").c_str(), "w", stdout))
      _exit(126);
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    execv(ZHOST_EXE, argv.data());
    _exit(127);
  }
}

BackgroundJob::~BackgroundJob() {
  if (exit_status_) return;
  for (pid_t pid : children_of(launcher_)) kill(pid, SIGKILL);
  kill(launcher_, SIGKILL);
  waitpid(launcher_, nullptr, 0);
}

bool BackgroundJob::wait_for_ranks(double seconds) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < deadline) {
    ranks_.clear();
    for (pid_t pid : children_of(launcher_)) ranks_[rank_of(pid)] = pid;
    if (static_cast<int>(ranks_.size()) == nproc_ && !ranks_.count(-1)) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

bool BackgroundJob::wait_for_training() {
  const fs::path metrics = dir_ / "runs" / "long" / "metrics.jsonl";
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  while (!(fs::exists(metrics) && fs::file_size(metrics) > 0) && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return fs::exists(metrics) && wait_for_ranks(5);
}

bool BackgroundJob::all_ranks_gone() const {
  for (const auto& [rank, pid] : ranks_)
    if (kill(pid, 0) == 0) return false;
  return true;
}

std::optional<int> BackgroundJob::wait_for_exit(double seconds) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  int status = 0;
  while (waitpid(launcher_, &status, WNOHANG) == 0) {
    if (Clock::now() > deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  exit_status_ = status;
  return status;
}

std::string BackgroundJob::err() const { return read_text_file(dir_ / "err.txt"); }

std::string BackgroundJob::summary() const {
  std::istringstream lines(err());
  std::string summary;
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("zhost: error: ", 0) == 0) summary = line;
  return summary;
}

std::string small_job_config() {
  return R"(steps = 6
seed = 7
steps_per_print = 1
gradient_clipping = 0.5
[model]
type = "gpt"
layers = 2
heads = 2
width = 32
vocab = 256
seq_len = 16
[data]
type = "text"
path = "/usr/share/common-licenses"
[optimizer]
type = "AdamW"
lr = 0.01
weight_decay = 0.1
[scheduler]
type = "WarmupLR"
warmup_num_steps = 3
warmup_max_lr = 0.01
[run]
save_final_weights = true
device = "cpu"
[comm]
timeout_s = 60
)";
}

RunOutput run_zhost(const fs::path& dir, const std::string& config_text, const std::string& name,
                    const std::string& args, const std::string& shell_prefix) {
  fs::path config = dir / (name + ".toml");
  std::ofstream(config) << config_text;
  return run_zhost_file(dir, config, name, args, shell_prefix);
}

RunOutput run_zhost_file(const fs::path& dir, const fs::path& config, const std::string& name, const std::string& args,
                         const std::string& shell_prefix) {
  std::string command = "cd " + dir.string() + " && " + shell_prefix + ZHOST_EXE + " run " + config.string() +
                        " --set run.dir=" + (dir / "runs").string() + " --set run.name=" + name + " " + args + " >" +
                        name + ".out 2>" + name + ".err";
  int status = std::system(command.c_str());
  RunOutput r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = zhost::testing::read_text_file(dir / (name + ".out"));
  r.err = zhost::testing::read_text_file(dir / (name + ".err"));
  r.run_dir = dir / "runs" / name;
  std::ifstream metrics(r.run_dir / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    auto j = nlohmann::json::parse(line);
    std::map<std::string, double> record;
    for (auto& [key, value] : j.items()) {
      if (value.is_number()) record[key] = value.get<double>();
      if (value.is_boolean()) record[key] = value.get<bool>() ? 1.0 : 0.0;
    }
    r.metrics.push_back(record);
    r.losses.push_back(j["loss"].is_null() ? NAN : j["loss"].get<double>());
  }
  if (fs::exists(r.run_dir / "weights.json")) {
    auto index = nlohmann::json::parse(zhost::testing::read_text_file(r.run_dir / "weights.json"));
    std::ifstream data(r.run_dir / "weights.bin", std::ios::binary);
    for (auto& entry : index) {
      std::vector<float> values(entry["numel"].get<size_t>());
      data.seekg(entry["offset"].get<int64_t>() * 4);
      data.read(reinterpret_cast<char*>(values.data()), values.size() * 4);
      r.weights[entry["name"]] = std::move(values);
    }
  }
  return r;
}

std::string weights_mismatch(const RunOutput& a, const RunOutput& b, double rtol, double atol) {
  if (b.weights.empty()) return "no weights saved";
  if (a.weights.size() != b.weights.size()) return "the runs hold different parameters";
  std::string worst_name;
  double worst_ratio = 0, worst_diff = 0, worst_scale = 0;
  for (const auto& [name, values] : b.weights) {
    auto it = a.weights.find(name);
    if (it == a.weights.end() || it->second.size() != values.size()) return "parameter " + name + " differs in shape";
    double scale = 0, diff = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      scale = std::max(scale, static_cast<double>(std::fabs(values[i])));
      diff = std::max(diff, static_cast<double>(std::fabs(values[i] - it->second[i])));
    }
    double ratio = diff / (rtol * scale + atol);
    if (ratio > worst_ratio) {
      worst_ratio = ratio;
      worst_name = name;
      worst_diff = diff;
      worst_scale = scale;
    }
  }
  if (worst_ratio <= 1) return "";
  std::ostringstream message;
  message << worst_name << ": max |difference| " << worst_diff << " exceeds " << rtol << " * " << worst_scale << " + "
          << atol;
  return message.str();
}

std::string weights_norm_mismatch(const RunOutput& a, const RunOutput& b, double relative) {
  if (b.weights.empty()) return "no weights saved";
  if (a.weights.size() != b.weights.size()) return "the runs hold different parameters";
  std::string worst_name;
  double worst = 0;
  for (const auto& [name, values] : b.weights) {
    auto it = a.weights.find(name);
    if (it == a.weights.end() || it->second.size() != values.size()) return "parameter " + name + " differs in shape";
    double diff = 0, norm = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      const double d = static_cast<double>(it->second[i]) - values[i];
      diff += d * d;
      norm += static_cast<double>(values[i]) * values[i];
    }
    const double ratio = std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30);
    if (ratio > worst) {
      worst = ratio;
      worst_name = name;
    }
  }
  if (worst <= relative) return "";
  std::ostringstream message;
  message << worst_name << ": ||difference|| / ||weights|| = " << worst << " exceeds " << relative;
  return message.str();
}

void expect_losses_near(const RunOutput& a, const RunOutput& b, double relative) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  for (size_t i = 0; i < a.losses.size(); ++i)
    EXPECT_NEAR(a.losses[i], b.losses[i], relative * std::fabs(b.losses[i])) << "step " << i + 1;
}

bool cuda_device_present() { return access("/dev/nvidiactl", F_OK) == 0; }

bool built_without_cuda(const RunOutput& r) {
  return r.exit_code != 0 && r.err.find("has no CUDA device") != std::string::npos;
}

void expect_clipping_acted(const RunOutput& r) {
  ASSERT_FALSE(r.metrics.empty());
  int clipped = 0;
  for (const auto& m : r.metrics) clipped += m.at("grad_norm") > 0.5 ? 1 : 0;
  EXPECT_GT(clipped, 0);
}

nlohmann::json read_model_states(const RunOutput& r) {
  return nlohmann::json::parse(read_text_file(r.run_dir / "model_states.json"));
}

int unused_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  socklen_t length = sizeof address;
  bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  close(fd);
  return ntohs(address.sin_port);
}

pid_t spawn_logged(std::vector<std::string> argv, const fs::path& out, const fs::path& err,
                   const std::vector<std::string>& env) {
  const pid_t pid = fork();
  if (pid == 0) {
    if (!freopen(err.c_str(), "w", stderr) || !freopen(out.c_str(), "w", stdout)) _exit(126);
    for (const std::string& assignment : env) putenv(const_cast<char*>(assignment.c_str()));
    std::vector<char*> args;
    for (std::string& arg : argv) args.push_back(arg.data());
    args.push_back(nullptr);
    execv(argv[0].c_str(), args.data());
    _exit(127);
  }
  return pid;
}

int wait_for_exit_code(pid_t pid, double seconds) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (Clock::now() > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TwoNodeRun run_on_two_nodes(const ScratchDir& dir, const std::string& name, const std::string& sets,
                            int ranks_per_node) {
  const std::string multi_node = " --nproc " + std::to_string(ranks_per_node) +
                                 " --nnodes 2 --master-addr 127.0.0.1 --master-port " + std::to_string(unused_port());
  const fs::path config = dir.path() / (name + "-node1.toml");
  std::ofstream(config) << small_job_config();
  std::vector<std::string> node1{ZHOST_EXE,
                                 "run",
                                 config.string(),
                                 "--set",
                                 "run.dir=" + (dir.path() / "runs").string(),
                                 "--set",
                                 "run.name=" + name,
                                 "--node-rank",
                                 "1"};
  std::istringstream words(sets + multi_node);
  for (std::string word; words >> word;) node1.push_back(word);
  const pid_t node1_pid = spawn_logged(node1, dir.path() / (name + "-node1.out"), dir.path() / (name + "-node1.err"));

  TwoNodeRun run;
  run.node0 = run_zhost(dir.path(), small_job_config(), name, sets + multi_node + " --node-rank 0");
  run.node1_exit_code = wait_for_exit_code(node1_pid, 60);
  run.node1_err = read_text_file(dir.path() / (name + "-node1.err"));
  for (int rank = 0; rank < 2 * ranks_per_node; ++rank) {
    run.rank_steps.emplace_back();
    std::ifstream steps(run.node0.run_dir / ("steps.rank" + std::to_string(rank) + ".jsonl"));
    for (std::string line; std::getline(steps, line);) run.rank_steps.back().push_back(nlohmann::json::parse(line));
  }
  return run;
}

}  // namespace zhost::testing
