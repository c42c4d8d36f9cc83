// bench/nvme/step_bench.cpp: bench_nvme step CPU.so NVME.so NVME_PATH [--elements N] [--rounds R] [--set K=V]...
// One AdamW step of an N-element optimizer group in offload_cpu with its states resident in host memory,
// against the same step with the states in offload_nvme (the composition zero.offload_optimizer.device =
// "nvme" makes), and against the NVMe I/O such a step does alone (12 B per element read, 12 B written,
// through the same tier and settings) and the resident step (the CPU optimizer alone); all in the same round.
// --set goes to both plugins' hosts (each takes the keys its descriptor declares).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench/nvme/bench_nvme.hpp"
#include "sdk/conformance/kit_host.hpp"
#include "sdk/conformance/plugin_under_test.hpp"
#include "zhost/zhost.h"

namespace zhost::bench_nvme {

using conformance::Instance;
using conformance::KitHost;
using conformance::PluginUnderTest;
using Clock = std::chrono::steady_clock;

namespace {

// The overrides `plugin` declares.
std::map<std::string, std::string> declared(const PluginUnderTest& plugin,
                                            const std::map<std::string, std::string>& all) {
  std::map<std::string, std::string> mine;
  const zhost_plugin_descriptor& d = plugin.descriptor();
  for (size_t i = 0; i < d.num_config_keys; ++i)
    if (auto it = all.find(d.config_keys[i].key); it != all.end()) mine.insert(*it);
  return mine;
}

DLTensor floats(std::vector<float>& v, int64_t& shape) {
  shape = static_cast<int64_t>(v.size());
  DLTensor t{};
  t.data = v.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = DLDataType{kDLFloat, 32, 1};
  t.shape = &shape;
  return t;
}

// Sets up a group, takes one untimed step, returns the seconds of the second step.
double timed_step(KitHost& host, const PluginUnderTest& cpu, zhost_plugin_instance* tier, std::vector<float>& master) {
  const zhost_optimizer_tier_api* api = cpu.api().optimizer;
  zhost_optimizer_desc desc{};
  desc.struct_size = sizeof(desc);
  desc.kind = ZHOST_OPTIMIZER_ADAMW;
  desc.beta1 = 0.9;
  desc.beta2 = 0.999;
  desc.eps = 1e-8;
  desc.weight_decay = 0.01;
  desc.bias_correction = 1;
  int64_t shape = 0;
  DLTensor initial = floats(master, shape);
  zhost_tier_optimizer_setup setup{sizeof(setup), nullptr, 1, &desc, &initial};
  check(host, api->setup(tier, &setup), "optimizer_setup");
  double seconds = 0;
  for (int step = 1; step <= 2; ++step) {
    zhost_tier_grad_args grad_args{};
    grad_args.struct_size = sizeof(grad_args);
    grad_args.key = 1;
    check(host, api->grad(tier, &grad_args), "optimizer_grad");
    const DLTensor& grad = grad_args.grad;
    float* g = static_cast<float*>(grad.data);
    for (int64_t i = 0; i < grad.shape[0]; ++i) g[i] = static_cast<float>((i * 2654435761u) % 1000) * 1e-3f - 0.5f;
    zhost_tier_step_args args{};
    args.struct_size = sizeof(args);
    args.key = 1;
    args.step = step;
    args.lr = 1e-3;
    args.grad_scale = 1.0;
    const auto start = Clock::now();
    check(host, api->step(tier, &args), "optimizer_step");
    seconds = std::chrono::duration<double>(Clock::now() - start).count();
  }
  return seconds;
}

}  // namespace

int step_main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr,
                 "usage: bench_nvme step CPU.so NVME.so NVME_PATH [--elements N] [--rounds R] [--set K=V]...\n");
    return 2;
  }
  std::map<std::string, std::string> config{{"zero.offload_optimizer.nvme_path", argv[4]}};
  int64_t elements = 100000000;
  int rounds = 3;
  for (int i = 5; i + 1 < argc; i += 2) {
    const std::string arg = argv[i], value = argv[i + 1];
    if (arg == "--elements")
      elements = std::atoll(value.c_str());
    else if (arg == "--rounds")
      rounds = std::atoi(value.c_str());
    else if (arg == "--set" && value.find('=') != std::string::npos)
      config[value.substr(0, value.find('='))] = value.substr(value.find('=') + 1);
    else
      return std::fprintf(stderr, "bench_nvme step: unexpected argument %s\n", arg.c_str()), 2;
  }
  PluginUnderTest cpu(argv[2]), nvme(argv[3]);
  std::vector<float> master(static_cast<size_t>(elements));
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  for (auto& x : master) x = normal(rng);
  std::printf("elements %lld, settings:", static_cast<long long>(elements));
  for (const auto& [k, v] : config) std::printf(" %s=%s", k.c_str(), v.c_str());
  std::printf("\n");
  for (int round = 0; round < rounds; ++round) {
    double resident = 0, stored = 0, io = 0;
    {
      KitHost host(&cpu.descriptor(), declared(cpu, config), false);
      Instance tier(cpu, host);
      if (!tier.get()) return std::fprintf(stderr, "offload_cpu: %s\n", tier.error().c_str()), 1;
      resident = timed_step(host, cpu, tier.get(), master);
    }
    {
      KitHost storage_host(&nvme.descriptor(), declared(nvme, config), false);
      Instance storage(nvme, storage_host);
      if (!storage.get()) return std::fprintf(stderr, "offload_nvme: %s\n", storage.error().c_str()), 1;
      zhost_tier_ref ref{
          sizeof(ref), nullptr,       ZHOST_TIER_FOR_OPTIMIZER_STORAGE, storage.get(), nvme.api().storage,
          nullptr,     "offload_nvme"};
      {
        KitHost host(&cpu.descriptor(), declared(cpu, config), false);
        host.set_tier(ZHOST_TIER_FOR_OPTIMIZER_STORAGE, ref);
        Instance tier(cpu, host);
        if (!tier.get()) return std::fprintf(stderr, "offload_cpu: %s\n", tier.error().c_str()), 1;
        stored = timed_step(host, cpu, tier.get(), master);
      }
      // The step's I/O alone: 3 states of `elements` floats written, then read, as buffers of one chunk.
      const int64_t chunk = config.count("offload_cpu.storage_chunk_elements")
                                ? std::atoll(config["offload_cpu.storage_chunk_elements"].c_str())
                                : (1 << 20);
      io = io_seconds(storage_host, nvme, storage.get(), static_cast<uint64_t>(elements) * 12,
                      static_cast<uint64_t>(chunk) * 4);
    }
    const double bound = std::max(resident, io);
    std::printf(
        "round %d: step resident %.3f s, step on NVMe %.3f s, I/O alone %.3f s (%.2f GB/s both ways), "
        "on NVMe / max(I/O, resident) %.2f, 24 B moved per parameter per step\n",
        round, resident, stored, io, 2.0 * 12 * static_cast<double>(elements) / io / 1e9, stored / bound);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace zhost::bench_nvme
