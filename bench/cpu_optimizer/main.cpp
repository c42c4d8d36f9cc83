// bench/cpu_optimizer/main.cpp: bench_cpu_optimizer, the fused CPU Adam of the CPU-offload tier
// (plugins/offload_cpu/cpu_optimizer.hpp) against LibTorch's own torch::optim::AdamW stepping the same
// parameter buffer, and against a STREAM-style triad that shows what the memory can move.
//
// Per size, each round times every configuration back to back (so load from other work falls on all of
// them alike); a configuration's figure in a round is its median step; the table shows the median over
// rounds, and ratios are taken per round (paired) before their median.
//
// Bytes: ours counts 28 B per parameter (fp32 p, g, m, v read; p, m, v written), whether or not the bf16
// copy (2 B more written) is made. The triad a[i] = b[i] + s*c[i] on fp32 counts 3 x 4 = 12 B per element
// (STREAM's convention: no write-allocate traffic for a); each array is at least 4x the last-level cache.
// It runs twice, with plain and with streaming stores; "of triad" divides our GB/s by the faster of the
// two, same thread count, same round. "vs torch AdamW": torch's time / ours, same thread count, and in
// parentheses against torch's faster thread count of the round.
//
// A second table per size: the step prologue's exact gradient norm (Note [Exact gradient norm],
// zhost/kit/grad_numerics.hpp: max_abs, then square_sum_limbs, one thread each, as every ZeRO stage runs
// them on its reduced gradients) over the same gradient buffer, against LibTorch's fp32 at::norm on one thread
// and against one of our optimizer steps on one thread (no copy), timed in the same rounds. Its GB/s counts
// the 8 B per element its two passes read.
#include <ATen/Parallel.h>
#include <torch/optim/adamw.h>
#include <torch/torch.h>
#include <unistd.h>
#include <xmmintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "zhost/kit/cpu_optimizer.hpp"
#include "zhost/kit/grad_numerics.hpp"

namespace {

namespace optim = zhost::cpu_optim;
using Clock = std::chrono::steady_clock;

constexpr double kOurBytesPerParam = 28;
constexpr double kTriadBytesPerElement = 12;
const char* const kTriad = "triad (fp32), plain stores";
const char* const kTriadStreaming = "triad (fp32), streaming stores";
const char* const kExactNorm = "exact norm (max_abs + square_sum_limbs)";
const char* const kTorchNorm = "at::norm (fp32)";

struct Options {
  std::vector<int64_t> sizes = {10'000'000, 100'000'000};
  int rounds = 5;
  int steps = 5;    // timed steps per configuration per round (after one untimed)
  int threads = 0;  // 0: hardware threads
};

[[noreturn]] void usage(const char* message) {
  std::fprintf(stderr, "%s\nusage: bench_cpu_optimizer [--sizes N,N,...] [--rounds R] [--steps S] [--threads T]\n",
               message);
  std::exit(2);
}

Options parse(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage(("missing value for " + flag).c_str());
    const std::string value = argv[++i];
    if (flag == "--sizes") {
      options.sizes.clear();
      std::stringstream list(value);
      for (std::string item; std::getline(list, item, ',');) options.sizes.push_back(std::stoll(item));
    } else if (flag == "--rounds") {
      options.rounds = std::stoi(value);
    } else if (flag == "--steps") {
      options.steps = std::stoi(value);
    } else if (flag == "--threads") {
      options.threads = std::stoi(value);
    } else {
      usage(("unknown option " + flag).c_str());
    }
  }
  if (options.threads <= 0) options.threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return options;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

std::string load_average() {
  std::ifstream file("/proc/loadavg");
  std::string one, five, fifteen;
  file >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

std::string cpu_model() {
  std::ifstream file("/proc/cpuinfo");
  for (std::string line; std::getline(file, line);) {
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  }
  return "unknown";
}

// Seconds of one call of `step`: the median of `steps` timed calls after an untimed one.
double time_step(const std::function<void()>& step, int steps) {
  step();
  std::vector<double> seconds;
  for (int i = 0; i < steps; ++i) {
    const auto start = Clock::now();
    step();
    seconds.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  return median(seconds);
}

// a = b + s*c over `threads` contiguous chunks (starting at multiples of 4 elements), one std::thread each
// (spawned per call: ~0.1 ms against tens of ms of work). Plain stores: the loop as STREAM writes it,
// vectorized thanks to __restrict and -O3 (CMakeLists.txt); the stores of a also read a's lines first
// (write-allocate), which STREAM's 12 B do not count. Streaming stores (SSE2 MOVNTPS) skip that read.
void triad(float* __restrict a, const float* __restrict b, const float* __restrict c, float s, int64_t n, int threads,
           bool streaming_stores) {
  auto chunk = [=](int t) {
    const int64_t begin = n * t / threads / 4 * 4;
    const int64_t end = t + 1 == threads ? n : n * (t + 1) / threads / 4 * 4;
    float* __restrict out = a + begin;
    const float* __restrict x = b + begin;
    const float* __restrict y = c + begin;
    int64_t i = 0;
    if (streaming_stores) {  // `out` is 16-byte aligned: vectors are, and begin is a multiple of 4
      const __m128 scale = _mm_set1_ps(s);
      for (; i + 4 <= end - begin; i += 4) {
        _mm_stream_ps(out + i, _mm_add_ps(_mm_loadu_ps(x + i), _mm_mul_ps(scale, _mm_loadu_ps(y + i))));
      }
      _mm_sfence();
    }
    for (; i < end - begin; ++i) out[i] = x[i] + s * y[i];
  };
  if (threads == 1) return chunk(0);
  std::vector<std::thread> workers;
  for (int t = 1; t < threads; ++t) workers.emplace_back(chunk, t);
  chunk(0);
  for (std::thread& worker : workers) worker.join();
}

// Size in bytes of the last-level cache: sysfs (index3, else the highest index), else sysconf, else
// 32 MiB. (sysconf's figure can be off in VMs.)
int64_t last_level_cache_bytes() {
  for (int index = 4; index >= 0; --index) {
    std::ifstream file("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size");
    std::string text;
    if (!(file >> text) || text.empty()) continue;
    int64_t bytes = std::stoll(text);
    if (text.back() == 'K') bytes <<= 10;
    if (text.back() == 'M') bytes <<= 20;
    return bytes;
  }
  const long bytes = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return bytes > 0 ? bytes : 32 << 20;
}

struct Row {
  Row(std::string row_name, int row_threads, bool triad_row = false)
      : name(std::move(row_name)), threads(row_threads), is_triad(triad_row) {}
  std::string name;
  int threads;
  bool is_triad;
  std::vector<double> seconds;  // per round
};

}  // namespace

int main(int argc, char** argv) {
  const Options options = parse(argc, argv);
  const optim::Isa isa = optim::best_isa();
  std::printf("# bench_cpu_optimizer\n\n");
  std::printf("- cpu: %s, %u hardware threads, LLC %lld MiB; ISA used: %s\n", cpu_model().c_str(),
              std::thread::hardware_concurrency(), static_cast<long long>(last_level_cache_bytes() >> 20),
              optim::isa_name(isa));
  std::printf("- LibTorch %s, intra-op threads at start %d\n", TORCH_VERSION, at::get_num_threads());
  std::printf("- rounds %d, timed steps per configuration per round %d, threads %d\n", options.rounds, options.steps,
              options.threads);
  std::printf("- load average at start: %s\n", load_average().c_str());
  std::fflush(stdout);

  // Triad arrays: each at least 4x the LLC.
  const int64_t triad_n = std::max<int64_t>(4 * last_level_cache_bytes() / 4, 32 << 20);
  std::vector<float> ta(static_cast<size_t>(triad_n), 0.0f), tb(static_cast<size_t>(triad_n), 1.0f),
      tc(static_cast<size_t>(triad_n), 2.0f);

  std::printf(
      "\n| params | configuration | threads | ms/step (median; range over rounds) | Mparams/s | GB/s | "
      "vs torch AdamW, same threads (its faster) | of triad GB/s |\n|---|---|---|---|---|---|---|---|\n");
  for (const int64_t n : options.sizes) {
    const size_t size = static_cast<size_t>(n);
    std::vector<float> param(size), grad(size), exp_avg(size, 0.0f), exp_avg_sq(size, 0.0f);
    std::vector<uint16_t> copy(size);
    for (size_t i = 0; i < size; ++i) {
      param[i] = static_cast<float>(i % 1000) * 1e-3f - 0.5f;
      grad[i] = static_cast<float>((i * 7919) % 1000) * 1e-4f - 0.05f;
    }
    // torch's AdamW steps the same parameter and gradient buffers, with its own moments.
    at::Tensor torch_param = torch::from_blob(param.data(), {n}, torch::kFloat).set_requires_grad(true);
    torch_param.mutable_grad() = torch::from_blob(grad.data(), {n}, torch::kFloat);
    torch::optim::AdamW torch_adamw({torch_param}, torch::optim::AdamWOptions(1e-3).weight_decay(0.01));

    const at::Tensor grad_tensor = torch::from_blob(grad.data(), {n}, torch::kFloat);
    double norm_sink = 0;  // keeps the norms' results alive

    optim::AdamHyper hyper;
    hyper.lr = 1e-3;
    hyper.weight_decay = 0.01;
    int64_t step_count = 0;
    auto ours = [&](int threads, bool with_copy) {
      return [&, threads, with_copy] {
        optim::StepOptions step_options;
        step_options.isa = isa;
        step_options.threads = threads;
        hyper.step = ++step_count;
        optim::adam_step(hyper, param.data(), grad.data(), optim::GradType::kF32, exp_avg.data(), exp_avg_sq.data(),
                         with_copy ? copy.data() : nullptr, with_copy ? optim::Copy16::kBf16 : optim::Copy16::kNone, n,
                         step_options);
      };
    };
    auto torch_step = [&](int threads) {
      return [&, threads] {
        at::set_num_threads(threads);
        torch_adamw.step();
      };
    };

    const int all = options.threads;
    std::vector<Row> rows = {
        {"ours, fp32 grad, bf16 copy", all},
        {"ours, fp32 grad, bf16 copy", 1},
        {"ours, fp32 grad, no copy", all},
        {"ours, fp32 grad, no copy", 1},
        {"torch::optim::AdamW", all},
        {"torch::optim::AdamW", 1},
        {kTriad, all, true},
        {kTriad, 1, true},
        {kTriadStreaming, all, true},
        {kTriadStreaming, 1, true},
        {kExactNorm, 1},
        {kTorchNorm, 1},
    };
    std::vector<std::function<void()>> steps = {
        ours(all, true),
        ours(1, true),
        ours(all, false),
        ours(1, false),
        torch_step(all),
        torch_step(1),
        [&] { triad(ta.data(), tb.data(), tc.data(), 3.0f, triad_n, all, false); },
        [&] { triad(ta.data(), tb.data(), tc.data(), 3.0f, triad_n, 1, false); },
        [&] { triad(ta.data(), tb.data(), tc.data(), 3.0f, triad_n, all, true); },
        [&] { triad(ta.data(), tb.data(), tc.data(), 3.0f, triad_n, 1, true); },
        [&] {
          const float largest = zhost::kit::max_abs({grad_tensor});
          norm_sink += static_cast<double>(zhost::kit::square_sum_limbs({grad_tensor}, largest).limb[0]);
        },
        [&] {
          at::set_num_threads(1);
          norm_sink += grad_tensor.norm().item<double>();
        },
    };
    std::vector<std::string> loads;
    for (int round = 0; round < options.rounds; ++round) {
      loads.push_back(load_average());
      for (size_t k = 0; k < rows.size(); ++k) rows[k].seconds.push_back(time_step(steps[k], options.steps));
    }
    at::set_num_threads(all);

    // Per round: ratio of torch's time to ours (same threads), and of our GB/s to the triad's (same threads).
    auto row_of = [&](const std::string& name, int threads) -> const Row& {
      for (const Row& row : rows) {
        if (row.name == name && row.threads == threads) return row;
      }
      std::abort();
    };
    for (const Row& row : rows) {
      if (row.name == kExactNorm || row.name == kTorchNorm) continue;  // the second table
      const double seconds = median(row.seconds);
      const double lowest = *std::min_element(row.seconds.begin(), row.seconds.end());
      const double highest = *std::max_element(row.seconds.begin(), row.seconds.end());
      const int64_t elements = row.is_triad ? triad_n : n;
      const double bytes = row.is_triad ? kTriadBytesPerElement : kOurBytesPerParam;
      std::vector<double> vs_torch, vs_torch_faster, of_triad;
      const Row& torch_row = row_of("torch::optim::AdamW", row.threads);
      const Row& torch_one = row_of("torch::optim::AdamW", 1);
      const Row& torch_all = row_of("torch::optim::AdamW", all);
      const Row& triad_row = row_of(kTriad, row.threads);
      const Row& streaming_row = row_of(kTriadStreaming, row.threads);
      for (size_t r = 0; r < row.seconds.size(); ++r) {
        vs_torch.push_back(torch_row.seconds[r] / row.seconds[r]);
        vs_torch_faster.push_back(std::min(torch_one.seconds[r], torch_all.seconds[r]) / row.seconds[r]);
        // Against the faster of the two triads of the round, same thread count.
        const double triad_seconds = std::min(triad_row.seconds[r], streaming_row.seconds[r]);
        const double ours_gbs = static_cast<double>(n) * kOurBytesPerParam / row.seconds[r];
        const double triad_gbs = static_cast<double>(triad_n) * kTriadBytesPerElement / triad_seconds;
        of_triad.push_back(ours_gbs / triad_gbs);
      }
      const bool is_ours = row.name.rfind("ours", 0) == 0;
      char vs_torch_text[48] = "", of_triad_text[32] = "";
      if (is_ours) {
        std::snprintf(vs_torch_text, sizeof vs_torch_text, "%.1fx (%.1fx)", median(vs_torch), median(vs_torch_faster));
        std::snprintf(of_triad_text, sizeof of_triad_text, "%.0f%%", 100 * median(of_triad));
      }
      char gbs_text[48];
      if (row.name.rfind("torch", 0) == 0) {
        std::snprintf(gbs_text, sizeof gbs_text, "(%.1f at 28 B)", static_cast<double>(n) * bytes / seconds / 1e9);
      } else {
        std::snprintf(gbs_text, sizeof gbs_text, "%.1f", static_cast<double>(elements) * bytes / seconds / 1e9);
      }
      std::printf(
          "| %s | %s | %d | %.2f (%.2f - %.2f) | %s | %s | %s | %s |\n",
          row.is_triad ? (std::to_string(triad_n / 1'000'000) + "M x 3 arrays").c_str()
                       : (std::to_string(n / 1'000'000) + "M").c_str(),
          row.name.c_str(), row.threads, seconds * 1e3, lowest * 1e3, highest * 1e3,
          row.is_triad ? "" : std::to_string(static_cast<int64_t>(static_cast<double>(n) / seconds / 1e6)).c_str(),
          gbs_text, vs_torch_text, of_triad_text);
    }
    std::printf("| | load average before each round: %s | | | | | | |\n",
                [&] {
                  std::string joined;
                  for (const std::string& load : loads)
                    joined += (joined.empty() ? "" : "; ") + load.substr(0, load.find(' '));
                  return joined;
                }()
                    .c_str());
    const Row& exact = row_of(kExactNorm, 1);
    const Row& torch_norm = row_of(kTorchNorm, 1);
    const Row& step_one = row_of("ours, fp32 grad, no copy", 1);
    std::vector<double> vs_torch_norm, vs_step;
    for (size_t r = 0; r < exact.seconds.size(); ++r) {
      vs_torch_norm.push_back(exact.seconds[r] / torch_norm.seconds[r]);
      vs_step.push_back(exact.seconds[r] / step_one.seconds[r]);
    }
    std::printf(
        "\n| params | gradient norm, 1 thread | ms (median; range over rounds) | GB/s read | time / at::norm's | "
        "time / one optimizer step's (1 thread, no copy) |\n|---|---|---|---|---|---|\n");
    for (const Row* row : {&exact, &torch_norm}) {
      const double seconds = median(row->seconds);
      const double passes = row == &exact ? 2 : 1;
      char ratios[64] = "| |";
      if (row == &exact)
        std::snprintf(ratios, sizeof ratios, "%.2fx | %.2fx |", median(vs_torch_norm), median(vs_step));
      std::printf("| %lldM | %s | %.2f (%.2f - %.2f) | %.1f | %s\n", static_cast<long long>(n / 1'000'000),
                  row->name.c_str(), seconds * 1e3, *std::min_element(row->seconds.begin(), row->seconds.end()) * 1e3,
                  *std::max_element(row->seconds.begin(), row->seconds.end()) * 1e3,
                  static_cast<double>(n) * 4 * passes / seconds / 1e9, ratios);
    }
    if (norm_sink == 42.0) std::printf("\n");  // never: the norms must not be optimized away
    std::fflush(stdout);
  }
  std::printf("\n- load average at end: %s\n", load_average().c_str());
  return 0;
}
