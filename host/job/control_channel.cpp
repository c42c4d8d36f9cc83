// host/job/control_channel.cpp: Note [Control channel]: the files of RUN_DIR/control and both ends of them.
#include "host/job/control_channel.hpp"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "host/core/error.hpp"

namespace zhost::control {
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

constexpr const char* kJobFile = "job.json";

std::string numbered(const std::string& dir, int64_t number, const char* suffix) {
  char name[32];
  std::snprintf(name, sizeof(name), "%08lld.%s", static_cast<long long>(number), suffix);
  return dir + "/" + name;
}

// NNNNNNNN.request -> NNNNNNNN; 0 for any other name.
int64_t request_number(const std::string& name) {
  constexpr size_t kDigits = 8;
  if (name.size() != kDigits + 8 || name.compare(kDigits, 8, ".request") != 0) return 0;
  int64_t number = 0;
  for (size_t i = 0; i < kDigits; ++i) {
    if (name[i] < '0' || name[i] > '9') return 0;
    number = number * 10 + (name[i] - '0');
  }
  return number;
}

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Written under a temporary name and renamed: a reader sees the whole file or none.
void write_atomically(const std::string& path, const std::string& text) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << text << "\n";
    if (!out.flush()) fail("cannot write {}: {}", temporary, std::strerror(errno));
  }
  fs::rename(temporary, path);
}

std::string host_name() {
  char name[256] = {};
  ::gethostname(name, sizeof(name) - 1);
  return name;
}

// Whether the job that wrote job.json still runs (a job on another host is taken to run).
bool job_alive(const json& job) {
  if (job.value("host", std::string()) != host_name()) return true;
  const auto pid = job.value("pid", int64_t{0});
  return pid > 0 && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
}

}  // namespace

ControlChannel::ControlChannel(const std::string& run_dir) : dir_(run_dir + "/control") {
  fs::create_directories(dir_);
  write_atomically(dir_ + "/" + kJobFile, json{{"pid", ::getpid()}, {"host", host_name()}}.dump());
}

ControlChannel::~ControlChannel() {
  try {
    std::error_code ignored;
    fs::remove(dir_ + "/" + kJobFile, ignored);
    for (int64_t number = pending(); number != 0; number = pending())
      refuse(number, "the job ended before it could act on the command");
  } catch (const std::exception&) {  // a destructor: the client's deadline covers a job that cannot answer
  }
}

int64_t ControlChannel::pending() const {
  int64_t oldest = 0;
  std::error_code error;
  for (const auto& entry : fs::directory_iterator(dir_, error)) {
    const int64_t number = request_number(entry.path().filename().string());
    if (number == 0 || (oldest != 0 && number >= oldest)) continue;
    if (fs::exists(numbered(dir_, number, "ack"))) continue;
    oldest = number;
  }
  return oldest;
}

std::optional<json> ControlChannel::read(int64_t number) const {
  const std::optional<std::string> text = read_text(numbered(dir_, number, "request"));
  if (!text) return std::nullopt;
  json command = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (command.is_discarded() || !command.is_object()) return std::nullopt;
  return command;
}

void ControlChannel::acknowledge(int64_t number, int64_t after_step) const {
  write_atomically(numbered(dir_, number, "ack"), json{{"after_step", after_step}}.dump());
}

void ControlChannel::refuse(int64_t number, const std::string& error) const {
  write_atomically(numbered(dir_, number, "result"), json{{"ok", false}, {"error", error}}.dump());
  write_atomically(numbered(dir_, number, "ack"), json{{"error", error}}.dump());
}

void ControlChannel::answer(int64_t number, const json& result) const {
  write_atomically(numbered(dir_, number, "result"), result.dump());
}

namespace {

// Waits for `path` to hold JSON, while the job runs; throws when the deadline passes or the job is gone.
json wait_for(const std::string& path, const std::string& job_file, const std::string& run_dir, double timeout_s,
              const char* what) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    if (std::optional<std::string> text = read_text(path)) {
      json answer = json::parse(*text, nullptr, false);
      if (!answer.is_discarded()) return answer;
    }
    const std::optional<std::string> job = read_text(job_file);
    const json owner = job ? json::parse(*job, nullptr, false) : json();
    if (!job || owner.is_discarded() || !job_alive(owner)) {
      if (std::optional<std::string> text = read_text(path)) return json::parse(*text, nullptr, false);
      fail_usage("the job in {} ended before it {}", run_dir, what);
    }
    if (std::chrono::steady_clock::now() > deadline)
      fail_usage("the job in {} has not {} within {:.0f} s (a step may take longer: raise --timeout)", run_dir, what,
                 timeout_s);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

json send_command(const std::string& run_dir, const json& command, double timeout_s) {
  const std::string dir = run_dir + "/control", job_file = dir + "/" + kJobFile;
  if (!fs::is_directory(run_dir))
    fail_usage("{} is not a folder; name the run directory of a running zhost job", run_dir);
  const std::optional<std::string> job = read_text(job_file);
  if (!job) {
    if (!fs::exists(run_dir + "/config.toml"))
      fail_usage("{} is not a zhost run directory (it has no config.toml); name the run directory of a running job",
                 run_dir);
    fail_usage("the job in {} is not running (it has ended); there is nothing to control", run_dir);
  }
  const json owner = json::parse(*job, nullptr, false);
  if (owner.is_discarded() || !job_alive(owner))
    fail_usage("the job in {} is not running (its process {} is gone); there is nothing to control", run_dir,
               owner.is_discarded() ? "?" : std::to_string(owner.value("pid", 0)));

  // The next free number, taken by link(): a racing client that took it first makes this one try the next.
  const std::string temporary = fmt::format("{}/client.{}.tmp", dir, ::getpid());
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << command.dump() << "\n";
    if (!out.flush()) fail("cannot write {}: {}", temporary, std::strerror(errno));
  }
  int64_t number = 1;
  for (const auto& entry : fs::directory_iterator(dir))
    number = std::max(number, request_number(entry.path().filename().string()) + 1);
  while (::link(temporary.c_str(), numbered(dir, number, "request").c_str()) != 0) {
    if (errno != EEXIST) {
      const int error = errno;
      fs::remove(temporary);
      fail("cannot write a request into {}: {}", dir, std::strerror(error));
    }
    ++number;
  }
  fs::remove(temporary);

  const json ack = wait_for(numbered(dir, number, "ack"), job_file, run_dir, timeout_s, "acknowledged the command");
  if (ack.contains("error")) fail_usage("the job in {} refused the command: {}", run_dir, ack.value("error", ""));
  std::printf("command %lld accepted: the job acts on it after step %lld\n", static_cast<long long>(number),
              static_cast<long long>(ack.value("after_step", int64_t{0})));
  std::fflush(stdout);
  return wait_for(numbered(dir, number, "result"), job_file, run_dir, timeout_s, "reported the command's result");
}

}  // namespace zhost::control
