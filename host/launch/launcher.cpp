// host/launch/launcher.cpp: the local-rank supervisor: fork (Note [Forked ranks]) or fork+exec of each rank with its
// pipes, a poll loop that prefixes output lines, reaps ranks, forwards signals and stops the job when a rank fails.
#include "host/launch/launcher.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>

#include "host/core/error.hpp"
#include "host/core/fast_exit.hpp"
#include "host/launch/rank_env.hpp"

namespace zhost::launch {

using Clock = std::chrono::steady_clock;

namespace {

constexpr size_t kReadChunk = 64 * 1024;
constexpr size_t kMaxLine = 64 * 1024;  // longer output without a newline is passed on in pieces
constexpr std::chrono::milliseconds kPollInterval{100};
constexpr std::chrono::milliseconds kOutputDrainTime{200};  // after the last rank ended, for grandchildren

std::string errno_text(int error) { return std::strerror(error); }

void write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t written = ::write(fd, data.data(), data.size());
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) return;  // nowhere to write to: drop the output rather than fail the job
    data.remove_prefix(static_cast<size_t>(written));
  }
}

void write_prefixed_line(int rank, OutputStream stream, std::string_view line) {
  std::string text = fmt::format("[rank {}] ", rank);
  text.append(line);
  text.push_back('\n');
  write_all(stream == OutputStream::kStdout ? STDOUT_FILENO : STDERR_FILENO, text);
}

std::array<int, 2> make_pipe() {
  std::array<int, 2> fds{};
  if (::pipe2(fds.data(), O_CLOEXEC) != 0) fail("cannot create a pipe: {}", errno_text(errno));
  return fds;
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

std::vector<std::string> own_arguments() {
  std::ifstream file("/proc/self/cmdline", std::ios::binary);
  const std::string cmdline((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  size_t start = 0;
  while (start < cmdline.size()) {
    const size_t end = cmdline.find('\0', start);
    args.push_back(cmdline.substr(start, end - start));
    start = end == std::string::npos ? cmdline.size() : end + 1;
  }
  if (!args.empty()) args.erase(args.begin());  // argv[0]
  return args;
}

// ---- signals: SIGINT, SIGTERM and SIGCHLD are routed into a pipe while the ranks run ----------------

int g_signal_pipe_write = -1;

extern "C" void forward_signal_to_pipe(int signal) {
  const int saved_errno = errno;
  const auto byte = static_cast<unsigned char>(signal);
  [[maybe_unused]] const ssize_t ignored = ::write(g_signal_pipe_write, &byte, 1);
  errno = saved_errno;
}

class SignalCapture {
 public:
  static constexpr std::array<int, 3> kSignals{SIGINT, SIGTERM, SIGCHLD};

  SignalCapture() {
    ZHOST_ASSERT(g_signal_pipe_write < 0);  // one supervisor at a time
    pipe_ = make_pipe();
    for (int fd : pipe_) ::fcntl(fd, F_SETFL, O_NONBLOCK);
    g_signal_pipe_write = pipe_[1];
    struct sigaction action {};
    action.sa_handler = forward_signal_to_pipe;
    action.sa_flags = SA_RESTART | SA_NOCLDSTOP;
    sigemptyset(&action.sa_mask);
    for (size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &action, &previous_[i]);
  }

  ~SignalCapture() {
    for (size_t i = 0; i < kSignals.size(); ++i) ::sigaction(kSignals[i], &previous_[i], nullptr);
    g_signal_pipe_write = -1;
    for (int& fd : pipe_) close_fd(fd);
  }

  SignalCapture(const SignalCapture&) = delete;
  SignalCapture& operator=(const SignalCapture&) = delete;

  int fd() const { return pipe_[0]; }
  std::vector<int> fds() const { return {pipe_[0], pipe_[1]}; }

  std::vector<int> take() {
    std::vector<int> signals;
    unsigned char byte = 0;
    while (::read(pipe_[0], &byte, 1) == 1) signals.push_back(byte);
    return signals;
  }

 private:
  std::array<int, 2> pipe_{-1, -1};
  std::array<struct sigaction, kSignals.size()> previous_{};
};

// ---- one output stream of one rank, cut into lines --------------------------------------------------

class LineReader {
 public:
  LineReader(int fd, OutputStream stream) : fd_(fd), stream_(stream) {}
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;
  ~LineReader() { close_fd(fd_); }

  int fd() const { return fd_; }
  bool open() const { return fd_ >= 0; }

  // Reads what is there and passes on complete lines; at end of file, also the rest.
  void read_some(const OutputSink& sink, int rank) {
    std::array<char, kReadChunk> buffer;
    const ssize_t got = ::read(fd_, buffer.data(), buffer.size());
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) return;
    if (got <= 0) {
      finish(sink, rank);
      return;
    }
    pending_.append(buffer.data(), static_cast<size_t>(got));
    size_t start = 0;
    for (size_t newline; (newline = pending_.find('\n', start)) != std::string::npos; start = newline + 1) {
      sink(rank, stream_, std::string_view(pending_).substr(start, newline - start));
    }
    pending_.erase(0, start);
    if (pending_.size() >= kMaxLine) {
      sink(rank, stream_, pending_);
      pending_.clear();
    }
  }

  // Passes on a last line without newline and closes the stream.
  void finish(const OutputSink& sink, int rank) {
    if (!pending_.empty()) sink(rank, stream_, pending_);
    pending_.clear();
    close_fd(fd_);
  }

 private:
  int fd_;
  OutputStream stream_;
  std::string pending_;
};

constexpr std::string_view kErrorPrefix = "zhost: error: ";

struct RankProcess {
  int local_rank = 0;
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
  RankExit exit;
  std::unique_ptr<LineReader> out;
  std::unique_ptr<LineReader> err;
  std::string last_error;                          // its last "zhost: error: " line, without the prefix
  std::optional<Clock::time_point> stopped_since;  // seen stopped (SIGSTOP, a debugger) since then
};

std::string describe_exit(const RankProcess& process) {
  const RankExit& exit = process.exit;
  std::string text = exit.signal != 0
                         ? fmt::format("rank {} (pid {}) was killed by signal {} ({})", exit.rank, exit.pid,
                                       exit.signal, signal_name(exit.signal))
                         : fmt::format("rank {} (pid {}) exited with code {}", exit.rank, exit.pid, exit.exit_code);
  if (!process.last_error.empty()) text += ": " + process.last_error;
  return text;
}

// The launcher's exit code for a rank that failed: the documented codes pass through, anything else (a
// signal, a crash, a code zhost does not use) counts as a failed rank.
int exit_code_for(const RankExit& exit) {
  const bool documented = exit.signal == 0 && exit.exit_code >= static_cast<int>(ExitCode::kRuntime) &&
                          exit.exit_code <= static_cast<int>(ExitCode::kRankFailed);
  return documented ? exit.exit_code : static_cast<int>(ExitCode::kRankFailed);
}

// True when the process is stopped (state T, or t under a debugger) according to /proc/PID/stat.
bool is_stopped(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  const std::string line((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t name_end = line.rfind(')');  // the command name may hold spaces and parentheses
  return name_end != std::string::npos && name_end + 2 < line.size() &&
         (line[name_end + 2] == 'T' || line[name_end + 2] == 't');
}

// What exec needs, prepared before fork (the child may only make async-signal-safe calls).
struct ExecImage {
  std::vector<std::string> strings;
  std::vector<char*> argv;
  std::vector<char*> envp;

  ExecImage(const std::string& program, const std::vector<std::string>& args, const EnvMap& env) {
    strings.push_back(program);
    strings.insert(strings.end(), args.begin(), args.end());
    const size_t argc = strings.size();
    for (const auto& [name, value] : env) strings.push_back(name + "=" + value);
    for (size_t i = 0; i < strings.size(); ++i) (i < argc ? argv : envp).push_back(strings[i].data());
    argv.push_back(nullptr);
    envp.push_back(nullptr);
  }
};

// What a rank's process sets up first, exec or not: it dies with the launcher, leads its own process group,
// takes signals as a fresh process would and writes into the launcher's pipes. Async-signal-safe only.
void prepare_child(pid_t parent, int out_fd, int err_fd) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(1);  // the launcher died before prctl took effect
  ::setpgid(0, 0);
  sigset_t no_signals;
  sigemptyset(&no_signals);
  ::sigprocmask(SIG_SETMASK, &no_signals, nullptr);
  ::signal(SIGPIPE, SIG_DFL);
  ::dup2(out_fd, STDOUT_FILENO);
  ::dup2(err_fd, STDERR_FILENO);
}

[[noreturn]] void exec_in_child(const ExecImage& image, pid_t parent, int out_fd, int err_fd, int status_fd) {
  prepare_child(parent, out_fd, err_fd);
  ::execve(image.argv[0], image.argv.data(), image.envp.data());
  const int error = errno;
  [[maybe_unused]] const ssize_t ignored = ::write(status_fd, &error, sizeof error);
  ::_exit(127);
}

// Note [Forked ranks]
// Loading Debian's LibTorch (about 290 shared objects and their static initialisers) costs a process about
// 1 s of CPU before main() runs, and an exec'd rank pays it again. Given LaunchOptions::rank_main, the
// launcher, which has paid it once, forks each rank and calls rank_main in the child without exec.
// Forking without exec is sound only from a single-threaded process (a lock held by a thread that does not
// exist in the child stays held forever), so the launcher counts its threads (/proc/self/task) first and
// execs when there is more than one, or when ZHOST_LAUNCH=exec asks for it (a debugger or a preloaded tool
// that must see a fresh process). What exec would have reset, the child resets by hand: the launcher's
// signal handlers and descriptors, and the environment, replaced by the rank's. Libraries that read the
// environment only when loaded keep the launcher's values: zhost sets what it relies on through their APIs
// instead (thread counts: host/engine/cpu_threads.cpp; LibTorch's log level: engine::apply_log_environment).
bool fork_without_exec_is_safe(std::string& why_not) {
  const char* mode = std::getenv("ZHOST_LAUNCH");
  if (mode != nullptr && std::string_view(mode) == "exec") {
    why_not = "ZHOST_LAUNCH=exec";
    return false;
  }
  std::error_code error;
  size_t threads = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/task", error);
       !error && it != std::filesystem::directory_iterator(); it.increment(error)) {
    ++threads;
  }
  if (error || threads != 1) {
    why_not = error ? "cannot count this process's threads: " + error.message()
                    : fmt::format("the launcher runs {} threads", threads);
    return false;
  }
  return true;
}

[[noreturn]] void run_forked_rank(const std::function<int()>& rank_main, const EnvMap& env,
                                  const std::vector<int>& launcher_fds, pid_t parent, int out_fd, int err_fd) {
  prepare_child(parent, out_fd, err_fd);
  for (int signal : {SIGINT, SIGTERM, SIGCHLD}) ::signal(signal, SIG_DFL);  // SignalCapture's, in the launcher
  for (int fd : launcher_fds) ::close(fd);
  ::close(out_fd);
  ::close(err_fd);
  ::clearenv();
  for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
  fast_exit(rank_main());  // as `zhost run` ends in main(): Note [Fast exit]
}

class Supervisor {
 public:
  explicit Supervisor(const LaunchOptions& options) : options_(options) {
    const OutputSink print = options.on_output ? options.on_output : OutputSink(write_prefixed_line);
    sink_ = [this, print](int rank, OutputStream stream, std::string_view line) {
      if (stream == OutputStream::kStderr && line.substr(0, kErrorPrefix.size()) == kErrorPrefix) {
        for (RankProcess& process : ranks_) {
          if (process.rank == rank) process.last_error = std::string(line.substr(kErrorPrefix.size()));
        }
      }
      print(rank, stream, line);
    };
    args_ = options.args ? *options.args : own_arguments();
    master_port_ = options.master_port != 0 ? options.master_port : pick_free_port();
  }

  LaunchResult run() {
    std::string why_not;
    fork_only_ = options_.rank_main && fork_without_exec_is_safe(why_not);
    if (fork_only_) {
      spdlog::debug("launch: forking the ranks from this process (Note [Forked ranks])");
    } else if (options_.rank_main) {
      spdlog::debug("launch: starting the ranks by exec: {}", why_not);
    }
    SignalCapture signals;
    try {
      for (int local = 0; local < options_.nproc; ++local) start(local, signals.fds());
    } catch (...) {
      signal_running(SIGKILL);
      for (RankProcess& process : ranks_) {
        if (process.running) ::waitpid(process.pid, nullptr, 0);
      }
      throw;
    }
    supervise(signals);
    result_.ranks.clear();
    for (const RankProcess& process : ranks_) result_.ranks.push_back(process.exit);
    return result_;
  }

 private:
  EnvMap rank_env(int local_rank) const {
    EnvMap env = current_env();
    const int world_size = options_.nnodes * options_.nproc;
    env["RANK"] = std::to_string(options_.node_rank * options_.nproc + local_rank);
    env["WORLD_SIZE"] = std::to_string(world_size);
    env["LOCAL_RANK"] = std::to_string(local_rank);
    env["LOCAL_WORLD_SIZE"] = std::to_string(options_.nproc);
    env["GROUP_RANK"] = std::to_string(options_.node_rank);  // the node, as torchrun names it
    env["MASTER_ADDR"] = options_.master_addr;
    env["MASTER_PORT"] = std::to_string(master_port_);
    env["ZHOST_LAUNCHED"] = "1";
    // LibTorch's own log lines (c10's log: c10d's failed receives with their backtraces and the like) would
    // come before zhost's error, which already says the cause. A TORCH_CPP_LOG_LEVEL of the user's wins.
    env.emplace("TORCH_CPP_LOG_LEVEL", "FATAL");
    for (const auto& [name, value] : options_.env) env[name] = value;
    return env;
  }

  void start(int local_rank, const std::vector<int>& launcher_fds) {
    RankProcess& process = ranks_.emplace_back();
    process.local_rank = local_rank;
    process.rank = options_.node_rank * options_.nproc + local_rank;
    const EnvMap env = rank_env(local_rank);
    std::optional<ExecImage> image;
    if (!fork_only_) image.emplace(options_.program, args_, env);
    std::array<int, 2> out = make_pipe(), err = make_pipe(), status = make_pipe();
    std::vector<int> child_closes = launcher_fds;
    for (const RankProcess& other : ranks_) {
      for (const LineReader* reader : {other.out.get(), other.err.get()}) {
        if (reader != nullptr && reader->open()) child_closes.push_back(reader->fd());
      }
    }
    child_closes.insert(child_closes.end(), {out[0], err[0], status[0], status[1]});
    std::fflush(nullptr);  // nothing buffered in the launcher is written twice
    const pid_t parent = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0 && fork_only_) run_forked_rank(options_.rank_main, env, child_closes, parent, out[1], err[1]);
    if (pid == 0) exec_in_child(*image, parent, out[1], err[1], status[1]);
    const int fork_error = errno;
    for (int* fd : {&out[1], &err[1], &status[1]}) close_fd(*fd);
    process.out = std::make_unique<LineReader>(out[0], OutputStream::kStdout);
    process.err = std::make_unique<LineReader>(err[0], OutputStream::kStderr);
    if (pid < 0) {
      close_fd(status[0]);
      const int rank = process.rank;
      ranks_.pop_back();
      fail("could not start rank {}: fork failed: {}", rank, errno_text(fork_error));
    }
    ::setpgid(pid, pid);  // also in the child: whichever runs first
    process.pid = pid;
    process.running = true;
    process.exit.rank = process.rank;
    process.exit.pid = pid;
    for (int* fd : {&out[0], &err[0]}) ::fcntl(*fd, F_SETFL, O_NONBLOCK);

    int exec_error = 0;
    ssize_t got;
    while ((got = ::read(status[0], &exec_error, sizeof exec_error)) < 0 && errno == EINTR) {
    }
    close_fd(status[0]);
    if (got == static_cast<ssize_t>(sizeof exec_error)) {
      fail("could not start rank {}: cannot execute '{}': {}", process.rank, options_.program, errno_text(exec_error));
    }
  }

  bool any_running() const {
    for (const RankProcess& process : ranks_) {
      if (process.running) return true;
    }
    return false;
  }

  void signal_running(int signal) {
    for (const RankProcess& process : ranks_) {
      if (!process.running) continue;
      if (::kill(-process.pid, signal) != 0) ::kill(process.pid, signal);
    }
  }

  void begin_stop(int signal) {
    signal_running(signal);
    signal_running(SIGCONT);  // a stopped rank acts on the signal only once it runs
    if (!kill_at_)
      kill_at_ = Clock::now() +
                 std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.grace_period_s));
  }

  void record_failure(int exit_code, std::string message) {
    if (!result_.error.empty()) return;
    result_.exit_code = exit_code;
    result_.error = std::move(message);
  }

  void on_launcher_signal(int signal) {
    if (interrupted_) {
      signal_running(SIGKILL);  // a second Ctrl-C: no more grace
      return;
    }
    interrupted_ = true;
    record_failure(128 + signal, fmt::format("interrupted by {}; stopped the ranks", signal_name(signal)));
    begin_stop(signal);
  }

  void reap() {
    std::vector<const RankProcess*> failed;
    for (RankProcess& process : ranks_) {
      if (!process.running) continue;
      int status = 0;
      pid_t done;
      while ((done = ::waitpid(process.pid, &status, WNOHANG)) < 0 && errno == EINTR) {
      }
      if (done != process.pid) continue;
      process.running = false;
      if (WIFSIGNALED(status)) {
        process.exit.signal = WTERMSIG(status);
        process.exit.exit_code = -1;
      } else {
        process.exit.exit_code = WEXITSTATUS(status);
      }
      if (process.exit.signal != 0 || process.exit.exit_code != 0) failed.push_back(&process);
    }
    if (failed.empty()) return;
    // Of ranks that ended together, one killed by a signal is the cause and the others' errors follow from it.
    std::stable_partition(failed.begin(), failed.end(), [](const RankProcess* p) { return p->exit.signal != 0; });
    // A rank that is stopped is the likely cause of the others' failure: name it first.
    std::string stopped;
    for (const RankProcess& other : ranks_) {
      if (other.running && other.stopped_since) stopped += describe_stopped(other) + "; ";
    }
    const bool others_running = any_running();
    record_failure(exit_code_for(failed.front()->exit),
                   stopped + describe_exit(*failed.front()) + (others_running ? "; stopped the other ranks" : ""));
    if (others_running) begin_stop(SIGTERM);
  }

  std::string describe_stopped(const RankProcess& process) const {
    return fmt::format("rank {} (pid {}) is stopped (process state T) since {:.1f} s", process.rank, process.pid,
                       std::chrono::duration<double>(Clock::now() - *process.stopped_since).count());
  }

  // Notes which ranks are stopped; one stopped longer than stopped_rank_limit_s stops the job.
  void watch_stopped(Clock::time_point now) {
    for (RankProcess& process : ranks_) {
      if (!process.running || !is_stopped(process.pid)) {
        process.stopped_since.reset();
        continue;
      }
      if (!process.stopped_since) process.stopped_since = now;
      if (options_.stopped_rank_limit_s > 0 && result_.error.empty() &&
          now - *process.stopped_since >= std::chrono::duration<double>(options_.stopped_rank_limit_s)) {
        record_failure(static_cast<int>(ExitCode::kRankFailed),
                       fmt::format("{}, longer than the limit of {:.1f} s; stopped the ranks",
                                   describe_stopped(process), options_.stopped_rank_limit_s));
        begin_stop(SIGTERM);
      }
    }
  }

  void supervise(SignalCapture& signals) {
    const auto started = Clock::now();
    std::optional<Clock::time_point> output_deadline;
    while (true) {
      std::vector<pollfd> fds{{signals.fd(), POLLIN, 0}};
      std::vector<LineReader*> readers;
      for (RankProcess& process : ranks_) {
        for (LineReader* reader : {process.out.get(), process.err.get()}) {
          if (!reader->open()) continue;
          fds.push_back({reader->fd(), POLLIN, 0});
          readers.push_back(reader);
        }
      }
      const bool running = any_running();
      if (!running) {
        if (!output_deadline) output_deadline = Clock::now() + kOutputDrainTime;
        if (readers.empty() || Clock::now() >= *output_deadline) break;
      }
      ::poll(fds.data(), fds.size(), static_cast<int>(kPollInterval.count()));

      for (int signal : signals.take()) {
        if (signal != SIGCHLD) on_launcher_signal(signal);
      }
      for (size_t i = 0; i < readers.size(); ++i) {
        if (fds[i + 1].revents == 0) continue;
        int rank = 0;
        for (const RankProcess& process : ranks_) {
          if (process.out.get() == readers[i] || process.err.get() == readers[i]) rank = process.rank;
        }
        readers[i]->read_some(sink_, rank);
      }
      reap();
      const auto now = Clock::now();
      watch_stopped(now);
      if (options_.timeout_s > 0 && any_running() && result_.error.empty() &&
          now - started >= std::chrono::duration<double>(options_.timeout_s)) {
        record_failure(static_cast<int>(ExitCode::kRankFailed),
                       fmt::format("the ranks did not finish within {:.1f} s; stopped them", options_.timeout_s));
        begin_stop(SIGTERM);
      }
      if (kill_at_ && now >= *kill_at_) {
        signal_running(SIGKILL);
        kill_at_.reset();
      }
    }
    for (RankProcess& process : ranks_) {
      process.out->finish(sink_, process.rank);
      process.err->finish(sink_, process.rank);
    }
  }

  const LaunchOptions& options_;
  OutputSink sink_;
  std::vector<std::string> args_;
  int master_port_ = 0;
  std::vector<RankProcess> ranks_;
  std::optional<Clock::time_point> kill_at_;
  bool interrupted_ = false;
  bool fork_only_ = false;  // Note [Forked ranks]
  LaunchResult result_;
};

}  // namespace

std::string signal_name(int signal) {
  switch (signal) {
    case SIGHUP:
      return "SIGHUP";
    case SIGINT:
      return "SIGINT";
    case SIGQUIT:
      return "SIGQUIT";
    case SIGILL:
      return "SIGILL";
    case SIGTRAP:
      return "SIGTRAP";
    case SIGABRT:
      return "SIGABRT";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGKILL:
      return "SIGKILL";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGSEGV:
      return "SIGSEGV";
    case SIGUSR2:
      return "SIGUSR2";
    case SIGPIPE:
      return "SIGPIPE";
    case SIGALRM:
      return "SIGALRM";
    case SIGTERM:
      return "SIGTERM";
    case SIGXCPU:
      return "SIGXCPU";
    case SIGSYS:
      return "SIGSYS";
    default:
      return fmt::format("signal {}", signal);
  }
}

void name_this_rank_process(int rank) {
  const std::string name = fmt::format("zhost rank {}", rank);
  ::prctl(PR_SET_NAME, name.c_str(), 0, 0, 0);  // the kernel keeps the first 15 characters
}

int pick_free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail("cannot pick a free port: socket: {}", errno_text(errno));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = 0;
  socklen_t length = sizeof address;
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  const int error = errno;
  ::close(fd);
  if (!ok) fail("cannot pick a free port: {}", errno_text(error));
  return ntohs(address.sin_port);
}

void check_address_resolves(const std::string& address, const std::string& what) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int status = ::getaddrinfo(address.c_str(), nullptr, &hints, &found);
  if (found != nullptr) ::freeaddrinfo(found);
  if (status != 0) {
    fail_usage("{} '{}' does not resolve ({}); give rank 0's host name or IP address", what, address,
               ::gai_strerror(status));
  }
}

int max_local_ranks() {
  const long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  return kMaxRanksPerCore * static_cast<int>(cores > 0 ? cores : 1);
}

void check_launch_options(const LaunchOptions& options) {
  if (options.nproc < 1) fail_usage("--nproc must be at least 1, got {}", options.nproc);
  if (options.nproc > max_local_ranks()) {
    fail_usage("--nproc {} is more than this node's limit of {} ranks ({} per CPU core); start fewer ranks",
               options.nproc, max_local_ranks(), kMaxRanksPerCore);
  }
  if (options.nnodes < 1) fail_usage("--nnodes must be at least 1, got {}", options.nnodes);
  if (options.node_rank < 0 || options.node_rank >= options.nnodes) {
    fail_usage("--node-rank {} is outside 0..{} (--nnodes {})", options.node_rank, options.nnodes - 1, options.nnodes);
  }
  if (options.master_addr.empty()) fail_usage("--master-addr is empty");
  check_address_resolves(options.master_addr, "--master-addr");
  if (options.master_port < 0 || options.master_port > 65535) {
    fail_usage("--master-port {} is not a valid TCP port", options.master_port);
  }
  if (options.nnodes > 1 && options.master_port == 0) {
    fail_usage("--master-port is required with --nnodes {}: every node must use the same port", options.nnodes);
  }
  if (options.program.empty()) fail_usage("no program to launch");
  if (options.grace_period_s < 0 || options.timeout_s < 0 || options.stopped_rank_limit_s < 0) {
    fail_usage("grace period and time limits must not be negative");
  }
}

LaunchResult run_local_ranks(const LaunchOptions& options) {
  check_launch_options(options);
  return Supervisor(options).run();
}

int launch_local_ranks(const LaunchOptions& options) {
  const LaunchResult result = run_local_ranks(options);
  if (!result.error.empty()) write_all(STDERR_FILENO, "zhost: error: " + result.error + "\n");
  return result.exit_code;
}

}  // namespace zhost::launch
