// bench/nvme/main.cpp: bench_nvme PLUGIN.so NVME_PATH [--gib G] [--buffer-mib M] [--rounds R] [--set K=V]...
// The NVMe tier's throughput through its ABI: G GiB stored as buffers of M MiB (every store submitted, then
// every event waited), then loaded back the same way; write and read GB/s per round, with checksums on and
// off in the same round (so their cost is a paired ratio), the one going first alternating between rounds (the
// first run of a round meets a different state of the file system and page cache than the second). The plugin is
// created by the conformance kit's host with the descriptor's defaults plus --set. `bench_nvme step ...` is the
// optimizer-step mode (step_bench.cpp). run.sh runs fio next to the first mode.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "bench/nvme/bench_nvme.hpp"
#include "zhost/zhost.h"

namespace zhost::bench_nvme {

using conformance::Instance;
using conformance::KitHost;
using conformance::PluginUnderTest;
using Clock = std::chrono::steady_clock;

void check(KitHost& host, zhost_status* status, const char* what) {
  if (!status) return;
  std::fprintf(stderr, "bench_nvme: %s: %s\n", what, host.take_message(status).c_str());
  std::exit(1);
}

IoTimes io_times(KitHost& host, const PluginUnderTest& plugin, zhost_plugin_instance* tier, uint64_t total,
                 uint64_t buffer) {
  const zhost_storage_api* api = plugin.api().storage;
  const uint64_t buffers = std::max<uint64_t>(1, total / buffer);
  std::vector<char> source(buffer), target(buffer);
  std::mt19937_64 rng(1);
  for (auto& c : source) c = static_cast<char>(rng());
  int64_t shape = static_cast<int64_t>(buffer);
  auto pass = [&](bool store) {
    DLTensor view{};
    view.data = store ? source.data() : target.data();
    view.device = DLDevice{kDLCPU, 0};
    view.ndim = 1;
    view.dtype = DLDataType{kDLUInt, 8, 1};
    view.shape = &shape;
    std::vector<zhost_tier_event*> events;
    const auto start = Clock::now();
    for (uint64_t key = 0; key < buffers; ++key) {
      zhost_tier_io_args args{sizeof(args), nullptr, key, &view, nullptr};
      check(host, (store ? api->store : api->load)(tier, &args), store ? "store" : "load");
      if (args.event) events.push_back(args.event);
    }
    for (zhost_tier_event* e : events) {
      zhost_tier_event_args wait{sizeof(wait), nullptr, e, 0};
      check(host, api->wait(tier, &wait), "wait");
    }
    return std::chrono::duration<double>(Clock::now() - start).count();
  };
  IoTimes t;
  t.write = pass(true);
  t.read = pass(false);
  if (target != source) {
    std::fprintf(stderr, "bench_nvme: the last buffer read back differs from what was stored\n");
    std::exit(1);
  }
  for (uint64_t key = 0; key < buffers; ++key) {
    zhost_tier_key_args drop{sizeof(drop), nullptr, key};
    check(host, api->drop(tier, &drop), "drop");
  }
  return t;
}

namespace {

int throughput_main(int argc, char** argv) {
  std::map<std::string, std::string> config{{"zero.offload_optimizer.nvme_path", argv[2]}};
  double gib = 1;
  uint64_t buffer_mib = 64;
  int rounds = 3;
  for (int i = 3; i + 1 < argc; i += 2) {
    const std::string arg = argv[i], value = argv[i + 1];
    if (arg == "--gib")
      gib = std::atof(value.c_str());
    else if (arg == "--buffer-mib")
      buffer_mib = std::strtoull(value.c_str(), nullptr, 10);
    else if (arg == "--rounds")
      rounds = std::atoi(value.c_str());
    else if (arg == "--set" && value.find('=') != std::string::npos)
      config[value.substr(0, value.find('='))] = value.substr(value.find('=') + 1);
    else
      return std::fprintf(stderr, "bench_nvme: unexpected argument %s\n", arg.c_str()), 2;
  }
  PluginUnderTest plugin(argv[1]);
  const uint64_t total = static_cast<uint64_t>(gib * (1ull << 30)), buffer = buffer_mib << 20;
  for (int round = 0; round < rounds; ++round) {
    const bool on_first = round % 2 == 0;
    for (const char* verify : {on_first ? "true" : "false", on_first ? "false" : "true"}) {
      auto c = config;
      c["offload_nvme.verify_checksums"] = verify;
      KitHost host(&plugin.descriptor(), c, false);
      Instance tier(plugin, host);
      if (!tier.get()) return std::fprintf(stderr, "bench_nvme: create: %s\n", tier.error().c_str()), 1;
      const IoTimes t = io_times(host, plugin, tier.get(), total, buffer);
      const double bytes = static_cast<double>(std::max<uint64_t>(1, total / buffer) * buffer);
      std::printf("round %d checksums %-5s write %.3f GB/s read %.3f GB/s\n", round, verify, bytes / t.write / 1e9,
                  bytes / t.read / 1e9);
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace
}  // namespace zhost::bench_nvme

int main(int argc, char** argv) {
  if (argc >= 2 && std::strcmp(argv[1], "step") == 0) return zhost::bench_nvme::step_main(argc, argv);
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: bench_nvme PLUGIN.so NVME_PATH [--gib G] [--buffer-mib M] [--rounds R] [--set K=V]...\n"
                 "       bench_nvme step CPU.so NVME.so NVME_PATH [--elements N] [--rounds R] [--set K=V]...\n");
    return 2;
  }
  return zhost::bench_nvme::throughput_main(argc, argv);
}
