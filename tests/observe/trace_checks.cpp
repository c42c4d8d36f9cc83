// tests/observe/trace_checks.cpp: trace reading and the nesting check.
#include "trace_checks.hpp"

#include <algorithm>
#include <fstream>
#include <map>
#include <stdexcept>
#include <utility>
#include <vector>

namespace zhost::testing {

nlohmann::json read_json_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path.string());
  return nlohmann::json::parse(in);
}

std::string nesting_violation(const nlohmann::json& events) {
  struct Span {
    double begin, end;
    std::string name;
  };
  std::map<std::pair<int, int>, std::vector<Span>> tracks;
  for (const auto& e : events) {
    if (e.value("ph", "") != "X") continue;
    const double ts = e.at("ts").get<double>(), dur = e.at("dur").get<double>();
    tracks[{e.at("pid").get<int>(), e.at("tid").get<int>()}].push_back({ts, ts + dur, e.at("name").get<std::string>()});
  }
  constexpr double kSlack = 0.002;  // microseconds: the files keep nanosecond digits
  for (auto& [track, spans] : tracks) {
    std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end > b.end;  // parents before their children
    });
    std::vector<const Span*> open;
    for (const Span& span : spans) {
      while (!open.empty() && open.back()->end <= span.begin + kSlack) open.pop_back();
      if (!open.empty() && span.end > open.back()->end + kSlack)
        return "on pid " + std::to_string(track.first) + " tid " + std::to_string(track.second) + ": '" + span.name +
               "' starts inside '" + open.back()->name + "' and ends after it";
      open.push_back(&span);
    }
  }
  return "";
}

}  // namespace zhost::testing
