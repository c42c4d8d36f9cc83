// bench/nvme/bench_nvme.hpp: what bench_nvme's two modes share (main.cpp: throughput against fio;
// step_bench.cpp: an optimizer step with its states on NVMe).
#pragma once

#include <cstdint>

#include "sdk/conformance/kit_host.hpp"
#include "sdk/conformance/plugin_under_test.hpp"

namespace zhost::bench_nvme {

// Exits with the status's message when it is an error.
void check(conformance::KitHost& host, zhost_status* status, const char* what);

// Seconds to store `total` bytes through `tier` as buffers of `buffer` bytes (every store submitted, then
// every event waited) and, separately, to load them back; returns {write, read}.
struct IoTimes {
  double write = 0, read = 0;
};
IoTimes io_times(conformance::KitHost& host, const conformance::PluginUnderTest& plugin, zhost_plugin_instance* tier,
                 uint64_t total, uint64_t buffer);
inline double io_seconds(conformance::KitHost& host, const conformance::PluginUnderTest& plugin,
                         zhost_plugin_instance* tier, uint64_t total, uint64_t buffer) {
  IoTimes t = io_times(host, plugin, tier, total, buffer);
  return t.write + t.read;
}

int step_main(int argc, char** argv);

}  // namespace zhost::bench_nvme
