// host/cli/trace_command.cpp: `zhost trace merge RUN_DIR`: the ranks' traces (Note [Trace file] in
// host/telemetry/trace.hpp) as one Chrome trace, RUN_DIR/trace.json. The per-rank files hold one event per
// line, so merging streams them line by line (memory does not grow with the run); a rank's file cut short
// (the rank died) contributes its complete lines.
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>

#include "host/cli/commands.hpp"
#include "host/core/error.hpp"

namespace zhost::cli {
namespace fs = std::filesystem;

namespace {

// trace.rank<N>.json files of `dir`, by rank.
std::map<int, fs::path> rank_traces(const fs::path& dir) {
  std::map<int, fs::path> traces;
  static const std::regex kName(R"(trace\.rank(\d+)\.json)");
  for (const auto& entry : fs::directory_iterator(dir)) {
    std::smatch match;
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, match, kName)) traces[std::stoi(match[1].str())] = entry.path();
  }
  return traces;
}

}  // namespace

int trace_merge_command(const TraceMergeOptions& options) {
  const fs::path dir = options.run_dir;
  if (!fs::is_directory(dir)) fail_usage("{} is not a run directory; give the folder a run wrote", dir.string());
  const std::map<int, fs::path> traces = rank_traces(dir);
  if (traces.empty())
    fail_usage("{} holds no trace.rankN.json; run with --set run.trace=true to write them", dir.string());
  const fs::path output = options.output.empty() ? dir / "trace.json" : fs::path(options.output);
  std::ofstream out(output, std::ios::trunc);
  if (!out) fail("cannot write {}", output.string());

  nlohmann::json info;
  uint64_t events = 0;
  bool first_event = true;
  for (const auto& [rank, path] : traces) {
    std::ifstream in(path);
    std::string line;
    if (!std::getline(in, line)) fail("{} is empty: the rank wrote no trace", path.string());
    try {  // the header line: {"schemaVersion": 1, "distributedInfo": {...}, ..., "traceEvents": [
      if (info.is_null()) info = nlohmann::json::parse(line + "]}").at("distributedInfo");
    } catch (const nlohmann::json::exception& e) {
      fail("{} is not a zhost trace (its first line: {})", path.string(), e.what());
    }
    if (first_event) {
      info["rank"] = -1;  // all ranks
      out << "{\"schemaVersion\": 1, \"distributedInfo\": " << info.dump()
          << ", \"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
    }
    while (std::getline(in, line)) {
      if (line == "]}" || line.empty()) continue;
      if (line.back() == ',') line.pop_back();
      if (!nlohmann::json::accept(line)) continue;  // a line cut short by a rank that died
      if (!first_event) out << ",\n";
      out << line;
      first_event = false;
      ++events;
    }
  }
  out << "\n]}\n";
  out.flush();
  if (!out) fail("cannot write {} (disk full?)", output.string());
  std::cout << "wrote " << output.string() << ": " << events << " events from " << traces.size() << " rank(s)\n";
  return 0;
}

}  // namespace zhost::cli
