// tests/launch/rank_program.cpp: a stand-in rank for the launcher tests. Flags:
//   --fail-rank R            rank R fails after --fail-after-ms (default 300) ...
//   --fail-signal S          ... by raising signal S, or
//   --fail-code C            ... by exiting with code C, after printing "zhost: error: rank R fails on purpose"
//   --stop-rank R            rank R stops itself (SIGSTOP) after 100 ms
//   --sleep-s S              the other ranks sleep S seconds, then exit 0
//   --ignore-sigterm         the other ranks ignore SIGTERM (only SIGKILL stops them)
//   --pid-dir DIR            every rank writes its pid to DIR/rank<R>.pid first
//   --print-env              print the rank variables the launcher set
//   --print-output           print lines, a line written in two parts, a stderr line, and no final newline
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

namespace {

struct Flags {
  int fail_rank = -1;
  int fail_after_ms = 300;
  int fail_signal = 0;
  int fail_code = 0;
  int stop_rank = -1;
  double sleep_s = 0;
  bool ignore_sigterm = false;
  std::string pid_dir;
  bool print_env = false;
  bool print_output = false;
};

Flags parse(int argc, char** argv) {
  Flags flags;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    const auto value = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (flag == "--fail-rank")
      flags.fail_rank = std::stoi(value());
    else if (flag == "--fail-after-ms")
      flags.fail_after_ms = std::stoi(value());
    else if (flag == "--fail-signal")
      flags.fail_signal = std::stoi(value());
    else if (flag == "--fail-code")
      flags.fail_code = std::stoi(value());
    else if (flag == "--stop-rank")
      flags.stop_rank = std::stoi(value());
    else if (flag == "--sleep-s")
      flags.sleep_s = std::stod(value());
    else if (flag == "--ignore-sigterm")
      flags.ignore_sigterm = true;
    else if (flag == "--pid-dir")
      flags.pid_dir = value();
    else if (flag == "--print-env")
      flags.print_env = true;
    else if (flag == "--print-output")
      flags.print_output = true;
  }
  return flags;
}

std::string env_or_empty(const char* name) {
  const char* value = std::getenv(name);
  return value ? value : "";
}

void print_output() {
  std::printf("first line\n");
  std::fflush(stdout);
  [[maybe_unused]] ssize_t written = ::write(STDOUT_FILENO, "hal", 3);
  std::this_thread::sleep_for(std::chrono::milliseconds(150));
  written = ::write(STDOUT_FILENO, "ves joined\n", 11);
  std::fprintf(stderr, "to stderr\n");
  std::printf("no final newline");
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const Flags flags = parse(argc, argv);
  const int rank = std::atoi(env_or_empty("RANK").c_str());
  if (!flags.pid_dir.empty()) std::ofstream(flags.pid_dir + "/rank" + std::to_string(rank) + ".pid") << ::getpid();
  if (flags.print_env) {
    for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                             "MASTER_PORT", "ZHOST_LAUNCHED", "TORCH_CPP_LOG_LEVEL", "EXTRA"}) {
      std::printf("%s=%s\n", name, env_or_empty(name).c_str());
    }
  }
  if (flags.print_output) print_output();
  if (rank == flags.stop_rank) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ::raise(SIGSTOP);
  }
  if (rank == flags.fail_rank) {
    std::this_thread::sleep_for(std::chrono::milliseconds(flags.fail_after_ms));
    if (flags.fail_signal != 0) ::raise(flags.fail_signal);
    if (flags.fail_code != 0) std::fprintf(stderr, "zhost: error: rank %d fails on purpose\n", rank);
    return flags.fail_code;
  }
  if (flags.ignore_sigterm) ::signal(SIGTERM, SIG_IGN);
  std::this_thread::sleep_for(std::chrono::duration<double>(flags.sleep_s));
  return 0;
}
