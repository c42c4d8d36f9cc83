// bench/checkpoint/bench_checkpoint.cpp: the checkpoint files' write and read throughput.
//   bench_checkpoint write DIR --width C --layers L [--vocab V] [--seq T] [--ranks R] [--states master|adam]
//     writes a checkpoint of a gpt of that shape (the layout `zhost export --names hf` maps to GPT-2) into DIR as
//     R ranks' shards, one after another, each split evenly as ZeRO partitions split; prints GB and GB/s,
//     fsync included.
//   bench_checkpoint size --width C --layers L [--vocab V] [--seq T]
//     prints the bytes `write` would write (fp32 masters)
//   bench_checkpoint read DIR
//     opens DIR, checks every chunk's checksum (what a resume does first) and reads every fragment of every state
//     (what the ranks then load); prints GB/s of each pass.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "host/checkpoint/checkpoint_format.hpp"
#include "host/core/error.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using zhost::checkpoint::ParamShape;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::vector<ParamShape> gpt_params(int64_t C, int64_t L, int64_t V, int64_t T) {
  std::vector<ParamShape> p{{"embed.tokens.weight", {V, C}}, {"embed.positions.weight", {T, C}}};
  for (int64_t i = 0; i < L; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    p.push_back({b + "attn_norm.weight", {C}});
    p.push_back({b + "attn_norm.bias", {C}});
    p.push_back({b + "attn.qkv.weight", {3 * C, C}});
    p.push_back({b + "attn.qkv.bias", {3 * C}});
    p.push_back({b + "attn.proj.weight", {C, C}});
    p.push_back({b + "attn.proj.bias", {C}});
    p.push_back({b + "mlp_norm.weight", {C}});
    p.push_back({b + "mlp_norm.bias", {C}});
    p.push_back({b + "mlp.fc.weight", {4 * C, C}});
    p.push_back({b + "mlp.fc.bias", {4 * C}});
    p.push_back({b + "mlp.proj.weight", {C, 4 * C}});
    p.push_back({b + "mlp.proj.bias", {C}});
  }
  p.push_back({"head.norm.weight", {C}});
  p.push_back({"head.norm.bias", {C}});
  return p;
}

int64_t flag(int argc, char** argv, const std::string& name, int64_t fallback) {
  for (int i = 0; i + 1 < argc; ++i)
    if (argv[i] == name) return std::atoll(argv[i + 1]);
  return fallback;
}

int write(const std::string& dir, int argc, char** argv) {
  const int64_t C = flag(argc, argv, "--width", 1024), L = flag(argc, argv, "--layers", 4),
                V = flag(argc, argv, "--vocab", 32768), T = flag(argc, argv, "--seq", 2048);
  const int ranks = static_cast<int>(flag(argc, argv, "--ranks", 1));
  bool adam = false;
  for (int i = 0; i < argc; ++i) adam = adam || std::string(argv[i]) == "adam";
  const std::vector<std::string> states =
      adam ? std::vector<std::string>{"master", "exp_avg", "exp_avg_sq"} : std::vector<std::string>{"master"};
  const std::vector<ParamShape> params = gpt_params(C, L, V, T);
  int64_t total = 0;
  for (const auto& p : params) total += p.numel();
  std::vector<float> values(1 << 22);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 1021) * 0.001f;
  std::filesystem::create_directories(dir);
  const auto start = Clock::now();
  uint64_t bytes = 0;
  for (int r = 0; r < ranks; ++r) {
    zhost::checkpoint::ShardWriter writer(dir, r, params);
    // Rank r holds elements [total * r / R, total * (r + 1) / R) of the flat parameter space, as ZeRO splits it.
    const int64_t begin = total * r / ranks, end = total * (r + 1) / ranks;
    int64_t flat = 0;
    for (uint32_t id = 0; id < params.size(); ++id) {
      const int64_t n = params[id].numel(), lo = std::max(begin, flat), hi = std::min(end, flat + n);
      for (const std::string& state : states)
        for (int64_t at = lo; at < hi; at += static_cast<int64_t>(values.size())) {
          const int64_t count = std::min<int64_t>(static_cast<int64_t>(values.size()), hi - at);
          writer.write(id, state, at - flat, values.data(), count);
          bytes += static_cast<uint64_t>(count) * sizeof(float);
        }
      flat += n;
    }
    writer.finish({});
  }
  nlohmann::json shapes = nlohmann::json::array();
  for (const auto& p : params) shapes.push_back({{"name", p.name}, {"shape", p.shape}});
  zhost::checkpoint::write_checkpoint_json(dir, {{"format", zhost::checkpoint::kFormatName},
                                                 {"version", zhost::checkpoint::kFormatVersion},
                                                 {"world_size", ranks},
                                                 {"params", shapes},
                                                 {"states", states},
                                                 {"host", {{"step", 1}, {"applied_steps", 1}, {"skipped_steps", 0}}},
                                                 {"job",
                                                  {{"model", "gpt"},
                                                   {"model_spec",
                                                    {{"type", "gpt"},
                                                     {"layers", L},
                                                     {"heads", C / 64},
                                                     {"kv_heads", C / 64},
                                                     {"width", C},
                                                     {"ffn_width", 4 * C},
                                                     {"vocab", V},
                                                     {"seq_len", T}}}}}});
  const double s = seconds_since(start);
  std::printf("write %.3f GB (%lld parameters, %zu state(s), %d rank file(s)) in %.2f s: %.3f GB/s\n", bytes / 1e9,
              static_cast<long long>(total), states.size(), ranks, s, bytes / 1e9 / s);
  return 0;
}

// The bytes of values `write` would write (fp32 masters only).
int size(int argc, char** argv) {
  int64_t total = 0;
  for (const auto& p : gpt_params(flag(argc, argv, "--width", 1024), flag(argc, argv, "--layers", 4),
                                  flag(argc, argv, "--vocab", 32768), flag(argc, argv, "--seq", 2048)))
    total += p.numel();
  std::printf("%lld\n", static_cast<long long>(total * 4));
  return 0;
}

int read(const std::string& dir) {
  auto start = Clock::now();
  zhost::checkpoint::CheckpointReader reader(dir);
  for (int r = 0; r < reader.world_size(); ++r) reader.verify_rank_file(r);
  double s = seconds_since(start);
  std::printf("verify %.3f GB in %.2f s: %.3f GB/s\n", reader.data_bytes() / 1e9, s, reader.data_bytes() / 1e9 / s);
  start = Clock::now();
  std::vector<float> out;
  for (const auto& p : reader.params())
    for (const std::string& state : reader.states())
      for (int64_t at = 0; at < p.numel(); at += 1 << 22) {
        const int64_t n = std::min<int64_t>(1 << 22, p.numel() - at);
        out.resize(static_cast<size_t>(n));
        reader.read(p.name, state, at, n, out.data());
      }
  s = seconds_since(start);
  std::printf("load %.3f GB in %.2f s: %.3f GB/s\n", reader.data_bytes() / 1e9, s, reader.data_bytes() / 1e9 / s);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    if (argc >= 3 && std::string(argv[1]) == "write") return write(argv[2], argc, argv);
    if (argc >= 3 && std::string(argv[1]) == "read") return read(argv[2]);
    if (argc >= 2 && std::string(argv[1]) == "size") return size(argc, argv);
  } catch (const zhost::Error& e) {
    std::fprintf(stderr, "bench_checkpoint: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr,
               "usage: bench_checkpoint write DIR --width C --layers L [--vocab V] [--seq T] [--ranks R] "
               "[--states adam] | read DIR\n");
  return 2;
}
