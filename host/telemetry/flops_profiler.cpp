// host/telemetry/flops_profiler.cpp: DeepSpeed's flops profiler summary and per-block profile (see the header).
#include "host/telemetry/flops_profiler.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "host/core/error.hpp"

namespace zhost::engine {
namespace {

// DeepSpeed's number formatting: 1.23 M, 4.56 G, ...
std::string si(double value, const char* unit = "") {
  const char* prefixes[] = {" ", " K", " M", " G", " T", " P"};
  int i = 0;
  while (std::abs(value) >= 1000 && i < 5) {
    value /= 1000;
    ++i;
  }
  return fmt::format("{:.2f}{}{}", value, prefixes[i], unit);
}

std::string ms(double milliseconds) { return fmt::format("{:.2f} ms", milliseconds); }

}  // namespace

FlopsProfiler::FlopsProfiler(const FlopsProfilerSettings& settings, const model::Model& model, int world_size)
    : settings_(settings), model_(model), world_size_(world_size) {}

void FlopsProfiler::report(int64_t step, const ProfiledStep& m, const std::string& run_dir) const {
  const size_t blocks = model_.num_blocks();
  std::vector<int64_t> params(blocks, 0);
  for (const auto& p : model_.parameters()) params[static_cast<size_t>(p.block)] += p.tensor.numel();
  std::vector<double> macs(blocks);
  for (size_t b = 0; b < blocks; ++b) macs[b] = model_.forward_macs_per_token(b) * static_cast<double>(m.tokens);
  const double total_params = static_cast<double>(model_.num_parameters());
  const double total_macs = std::accumulate(macs.begin(), macs.end(), 0.0);
  const double fwd_flops = 2 * total_macs;
  const double fwd_s = m.forward_ms / 1e3, bwd_s = m.backward_ms / 1e3, iter_s = m.iteration_ms / 1e3;
  const double block_fwd_total = std::accumulate(m.block_forward_ms.begin(), m.block_forward_ms.end(), 0.0);

  std::vector<std::string> lines;
  auto line = [&](std::string text) { lines.push_back(std::move(text)); };
  line("-------------------------- DeepSpeed Flops Profiler --------------------------");
  line(fmt::format("Profile Summary at step {}:", step));
  line(
      "Notations: data parallel size (dp_size), model parallel size (mp_size), number of parameters (params), "
      "number of multiply-accumulate operations (MACs), number of floating-point operations (flops), "
      "floating-point operations per second (FLOPS), fwd latency (forward propagation latency), bwd latency "
      "(backward propagation latency), step (weights update latency), iter latency (sum of fwd, bwd and step "
      "latency); MACs are counted from the model's shapes (docs/profiling.md), latencies measured on rank 0");
  line(fmt::format("world size:                                                   {}", world_size_));
  line(fmt::format("data parallel size:                                           {}", world_size_));
  line("model parallel size:                                          1");
  line(fmt::format("batch size per GPU:                                           {}", m.samples));
  line(fmt::format("params per GPU:                                               {}", si(total_params)));
  line(fmt::format("params of model = params per GPU * mp_size:                   {}", si(total_params)));
  line(fmt::format("fwd MACs per GPU:                                             {}", si(total_macs, "MACs")));
  line(fmt::format("fwd flops per GPU:                                            {}", si(fwd_flops)));
  line(fmt::format("fwd flops of model = fwd flops per GPU * mp_size:             {}", si(fwd_flops)));
  line(fmt::format("fwd latency:                                                  {}", ms(m.forward_ms)));
  line(fmt::format("fwd FLOPS per GPU = fwd flops per GPU / fwd latency:          {}",
                   si(fwd_flops / std::max(fwd_s, 1e-12), "FLOPS")));
  line(fmt::format("bwd latency:                                                  {}", ms(m.backward_ms)));
  line(fmt::format("bwd FLOPS per GPU = 2 * fwd flops per GPU / bwd latency:      {}",
                   si(2 * fwd_flops / std::max(bwd_s, 1e-12), "FLOPS")));
  line(fmt::format("fwd+bwd FLOPS per GPU = 3 * fwd flops per GPU / (fwd+bwd latency):   {}",
                   si(3 * fwd_flops / std::max(fwd_s + bwd_s, 1e-12), "FLOPS")));
  line(fmt::format("step latency:                                                 {}", ms(m.step_ms)));
  line(fmt::format("iter latency:                                                 {}", ms(m.iteration_ms)));
  line(fmt::format("FLOPS per GPU = 3 * fwd flops per GPU / iter latency:         {}",
                   si(3 * fwd_flops / std::max(iter_s, 1e-12), "FLOPS")));
  line(fmt::format("samples/second:                                               {:.2f}",
                   static_cast<double>(m.samples * world_size_) / std::max(iter_s, 1e-12)));

  // Aggregated: the top blocks by params, MACs and forward latency.
  auto top = [&](const auto& values) {
    std::vector<size_t> order(blocks);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return values[a] > values[b]; });
    std::vector<std::string> names;
    for (size_t i = 0; i < std::min<size_t>(blocks, static_cast<size_t>(settings_.top_modules)); ++i)
      names.push_back(fmt::format("'block {}': {}", order[i], si(static_cast<double>(values[order[i]]))));
    return fmt::format("{}", fmt::join(names, ", "));
  };
  if (settings_.top_modules > 0) {
    line("----------------------------- Aggregated Profile per GPU -----------------------------");
    line(fmt::format("Top {} blocks in terms of params, MACs or fwd latency (the model's blocks are one level):",
                     settings_.top_modules));
    line("params      - {" + top(params) + "}");
    line("MACs        - {" + top(macs) + "}");
    line("fwd latency - {" + top(m.block_forward_ms) + "} (milliseconds)");
  }
  nlohmann::json per_block = nlohmann::json::array();
  if (settings_.detailed) {
    line("------------------------------ Detailed Profile per GPU ------------------------------");
    line(
        "Each block: params, percentage of total params, MACs, percentage of total MACs, fwd latency, percentage of "
        "total fwd latency, fwd FLOPS, bwd latency");
  }
  for (size_t b = 0; b < blocks; ++b) {
    const double fwd = b < m.block_forward_ms.size() ? m.block_forward_ms[b] : 0;
    const double bwd = b < m.block_backward_ms.size() ? m.block_backward_ms[b] : 0;
    per_block.push_back({{"block", b},
                         {"params", params[b]},
                         {"macs", macs[b]},
                         {"fwd_latency_ms", fwd},
                         {"bwd_latency_ms", bwd},
                         {"fwd_flops_per_s", fwd > 0 ? 2 * macs[b] / (fwd / 1e3) : 0.0}});
    if (settings_.detailed)
      line(fmt::format("  block {}: {}, {:.2f}% Params, {}, {:.2f}% MACs, {}, {:.2f}% latency, {}, {}", b,
                       si(static_cast<double>(params[b])), 100 * params[b] / std::max(total_params, 1.0),
                       si(macs[b], "MACs"), 100 * macs[b] / std::max(total_macs, 1.0), ms(fwd),
                       100 * fwd / std::max(block_fwd_total, 1e-12),
                       si(fwd > 0 ? 2 * macs[b] / (fwd / 1e3) : 0.0, "FLOPS"), ms(bwd)));
  }
  line("------------------------------------------------------------------------------");

  const nlohmann::json profile = {{"step", step},
                                  {"world_size", world_size_},
                                  {"samples_per_rank", m.samples},
                                  {"tokens_per_rank", m.tokens},
                                  {"params", static_cast<int64_t>(total_params)},
                                  {"fwd_macs", total_macs},
                                  {"fwd_latency_ms", m.forward_ms},
                                  {"bwd_latency_ms", m.backward_ms},
                                  {"step_latency_ms", m.step_ms},
                                  {"iter_latency_ms", m.iteration_ms},
                                  {"blocks", per_block}};
  const std::filesystem::path json_file = std::filesystem::path(run_dir) / "flops_profile.json";
  std::ofstream json_out(json_file);
  json_out << profile.dump(1) << "\n";
  if (!json_out)
    fail(
        "cannot write the flops profile to '{}' (disk full?); free space under run.dir or turn "
        "flops_profiler.enabled off",
        json_file.string());
  if (settings_.output_file.empty()) {
    for (const std::string& text : lines) spdlog::info("{}", text);
  } else {
    std::ofstream out(settings_.output_file);
    for (const std::string& text : lines) out << text << "\n";
    if (!out) fail("cannot write the flops profile to '{}' (flops_profiler.output_file)", settings_.output_file);
    spdlog::info("flops profile of step {} written to {}", step, settings_.output_file);
  }
}

}  // namespace zhost::engine
