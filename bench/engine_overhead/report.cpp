// bench/engine_overhead/report.cpp: reads a run.sh results folder (report.hpp) and prints the tables of
// RESULTS.md: per configuration zhost's and the reference's step time, their ratio and difference (zhost's
// host overhead), the phase breakdown, and the partition hook calls per step with what they cost.
//
// The unit of measurement is a window: the steps_per_print steps one zhost record averages, and the same
// steps of the reference. Within a round both sides run back to back (run.sh), so the round's ratio
// (zhost's median window / the reference's median window) and difference are paired figures that the
// machine's drift mostly cancels out of; the table gives their medians over rounds, and the ratios' range.
// Step times are medians over all windows of each side.
#include "bench/engine_overhead/report.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>
#include <vector>

#include "bench/engine_overhead/reference_loop.hpp"
#include "host/core/error.hpp"

namespace zhost::bench {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Phase = double WindowTiming::*;

struct Round {
  std::vector<WindowTiming> zhost, reference;
  double loss_difference = 0;  // |zhost's last printed loss - the reference's loss over the same steps|
};

struct Config {
  std::string label;
  json shape;  // the reference's description of the run (world size, model, hook points)
  std::vector<Round> rounds;
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

double median_of(const std::vector<WindowTiming>& windows, Phase phase) {
  std::vector<double> values;
  for (const auto& w : windows) values.push_back(w.*phase);
  return median(values);
}

// One side's windows (zhost's or the reference's) over all rounds.
std::vector<WindowTiming> all_windows(const Config& config, bool zhost) {
  std::vector<WindowTiming> windows;
  for (const auto& round : config.rounds)
    for (const auto& w : zhost ? round.zhost : round.reference) windows.push_back(w);
  return windows;
}

json read_json(const fs::path& file) {
  std::ifstream in(file);
  if (!in) fail("cannot read {}", file.string());
  return json::parse(in);
}

std::vector<json> read_json_lines(const fs::path& file) {
  std::ifstream in(file);
  if (!in) fail("cannot read {}", file.string());
  std::vector<json> records;
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) records.push_back(json::parse(line));
  return records;
}

WindowTiming window_from(const json& j, double ms_per_step) {
  return {ms_per_step, j["forward_ms"], j["backward_ms"], j["reduction_ms"], j["step_ms"]};
}

Round read_round(const fs::path& round_dir, const json& reference) {
  const std::vector<json> records = read_json_lines(round_dir / "zhost" / "metrics.jsonl");
  if (records.size() < 2)
    fail("{}: zhost printed {} records, need a warm-up record and at least one more", round_dir.string(),
         records.size());
  Round round;
  // zhost prints samples/s over the window; a step is train_batch_size samples.
  const double samples_per_step = reference["train_batch_size"].get<double>();
  for (size_t i = 1; i < records.size(); ++i)  // records[0] is zhost's warm-up
    round.zhost.push_back(window_from(records[i], 1000 * samples_per_step / records[i]["samples_per_s"].get<double>()));
  for (const json& w : reference["windows"]) round.reference.push_back(window_from(w, w["ms_per_step"]));

  // zhost's last record averages the loss over the steps since the record before it.
  const auto last_step = records.back()["step"].get<int64_t>();
  const auto first_step = records[records.size() - 2]["step"].get<int64_t>() + 1;
  const json& losses = reference["step_losses"];
  double reference_loss = 0;
  for (int64_t step = first_step; step <= last_step; ++step) reference_loss += losses[step - 1].get<double>();
  reference_loss /= static_cast<double>(last_step - first_step + 1);
  round.loss_difference = std::abs(records.back()["loss"].get<double>() - reference_loss);
  return round;
}

std::vector<Config> read_configs(const fs::path& results_dir) {
  std::vector<Config> configs;
  for (const auto& config_dir : fs::directory_iterator(results_dir)) {
    if (!config_dir.is_directory()) continue;
    Config config;
    config.label = config_dir.path().filename().string();
    for (const auto& round_dir : fs::directory_iterator(config_dir.path())) {
      const fs::path reference_file = round_dir.path() / "reference.json";
      if (!fs::exists(reference_file) || !fs::exists(round_dir.path() / "zhost" / "metrics.jsonl")) continue;
      config.shape = read_json(reference_file);
      config.rounds.push_back(read_round(round_dir.path(), config.shape));
    }
    if (!config.rounds.empty()) configs.push_back(std::move(config));
  }
  auto size_then_ranks = [](const Config& c) {
    return std::make_tuple(c.shape["num_parameters"].get<int64_t>(), c.shape["world_size"].get<int>(), c.label);
  };
  std::sort(configs.begin(), configs.end(),
            [&](const Config& a, const Config& b) { return size_then_ranks(a) < size_then_ranks(b); });
  return configs;
}

double zhost_ms_per_step(const Config& c) { return median_of(all_windows(c, true), &WindowTiming::ms_per_step); }

void print_step_table(const std::vector<Config>& configs) {
  fmt::print(
      "| config | ranks | params | rounds x windows | zhost ms/step | reference ms/step | ratio (range over "
      "rounds) | zhost - reference ms/step (paired) |\n|---|---|---|---|---|---|---|---|\n");
  for (const auto& c : configs) {
    std::vector<double> ratios, differences;  // paired: one per round
    for (const auto& round : c.rounds) {
      const double zhost = median_of(round.zhost, &WindowTiming::ms_per_step);
      const double reference = median_of(round.reference, &WindowTiming::ms_per_step);
      ratios.push_back(zhost / reference);
      differences.push_back(zhost - reference);
    }
    const auto [low, high] = std::minmax_element(ratios.begin(), ratios.end());
    const double zhost = zhost_ms_per_step(c), difference = median(differences);
    fmt::print("| {} | {} | {:.2f}M | {} x {} | {:.2f} | {:.2f} | {:.3f} ({:.3f} - {:.3f}) | {:+.2f} ({:+.1f}%) |\n",
               c.label, c.shape["world_size"].get<int>(), c.shape["num_parameters"].get<double>() / 1e6,
               c.rounds.size(), c.rounds.front().zhost.size(), zhost,
               median_of(all_windows(c, false), &WindowTiming::ms_per_step), median(ratios), *low, *high, difference,
               100 * difference / zhost);
  }
}

void print_breakdown_table(const std::vector<Config>& configs) {
  fmt::print(
      "\nPhase breakdown, median window, ms, zhost / reference: forward and backward per micro-batch, "
      "reduction and step per optimizer step. zhost copies each gradient into its all-reduce bucket inside "
      "backward; the reference flattens them in reduction.\n\n"
      "| config | forward | backward | reduction | step |\n|---|---|---|---|---|\n");
  for (const auto& c : configs) {
    fmt::print("| {} |", c.label);
    for (Phase phase :
         {&WindowTiming::forward_ms, &WindowTiming::backward_ms, &WindowTiming::reduction_ms, &WindowTiming::step_ms})
      fmt::print(" {:.2f} / {:.2f} |", median_of(all_windows(c, true), phase), median_of(all_windows(c, false), phase));
    fmt::print("\n");
  }
}

// Google Benchmark's JSON: nanoseconds per iteration (real time) of each case, by name.
std::map<std::string, double> read_call_costs_ns(const fs::path& file) {
  std::map<std::string, double> costs;
  if (!fs::exists(file)) return costs;
  const std::map<std::string, double> ns_per_unit{{"ns", 1}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9}};
  const json results = read_json(file);  // named: looping over a temporary's member would dangle
  for (const auto& run : results["benchmarks"])
    costs[run["name"].get<std::string>()] = run["real_time"].get<double>() * ns_per_unit.at(run["time_unit"]);
  return costs;
}

void print_hook_table(const std::vector<Config>& configs, const std::map<std::string, double>& ns) {
  for (const char* name : {"noop_hook_call", "grad_ready_no_reduce", "dl_view", "tensor_view"})
    if (!ns.count(name)) {
      fmt::print("\n(hooks.json lacks {}: per-call costs not measured)\n", name);
      return;
    }
  fmt::print("\nPer-call costs (Google Benchmark, real time, one thread):\n\n| case | ns/call |\n|---|---|\n");
  for (const auto& [name, cost] : ns) fmt::print("| {} | {:.1f} |\n", name, cost);

  // Per micro-batch: begin_micro_batch, pre_forward, post_forward, pre_backward and post_backward per block,
  // grad_ready per parameter, backward_end; per step: step. A grad_ready costs the call with stage 0's guard
  // (grad_ready_no_reduce), the trainer's dl_view and stage 0's tensor_view; the others cost noop_hook_call.
  const double grad_ready_ns = ns.at("grad_ready_no_reduce") + ns.at("dl_view") + ns.at("tensor_view");
  fmt::print(
      "\nPartition ABI calls per step: (4 x blocks + 2) x micro-batches + 1 other hooks at noop_hook_call, "
      "params x micro-batches grad_ready at grad_ready_no_reduce + dl_view + tensor_view = {:.1f} ns.\n\n"
      "| config | blocks | params | hook calls/step | hook cost us/step | % of zhost step |\n"
      "|---|---|---|---|---|---|\n",
      grad_ready_ns);
  for (const auto& c : configs) {
    const auto blocks = c.shape["blocks"].get<int64_t>(), params = c.shape["params"].get<int64_t>();
    const auto micro_batches = c.shape["gradient_accumulation_steps"].get<int64_t>();
    const int64_t other_calls = (4 * blocks + 2) * micro_batches + 1, grad_calls = params * micro_batches;
    const double cost_us =
        (static_cast<double>(other_calls) * ns.at("noop_hook_call") + static_cast<double>(grad_calls) * grad_ready_ns) /
        1e3;
    fmt::print("| {} | {} | {} | {} | {:.2f} | {:.4f}% |\n", c.label, blocks, params, other_calls + grad_calls, cost_us,
               100 * cost_us / 1e3 / zhost_ms_per_step(c));
  }
}

void print_loss_check(const std::vector<Config>& configs) {
  double worst = 0;
  for (const auto& c : configs)
    for (const auto& round : c.rounds) worst = std::max(worst, round.loss_difference);
  fmt::print(
      "\nSame work check: largest |zhost loss - reference loss| over the last printed window of every round: "
      "{:.3g}\n",
      worst);
}

}  // namespace

void print_report(const std::string& results_dir) {
  const std::vector<Config> configs = read_configs(results_dir);
  if (configs.empty()) fail("{}: no round with both reference.json and zhost/metrics.jsonl", results_dir);
  print_step_table(configs);
  print_breakdown_table(configs);
  print_hook_table(configs, read_call_costs_ns(fs::path(results_dir) / "hooks.json"));
  print_loss_check(configs);
}

}  // namespace zhost::bench
