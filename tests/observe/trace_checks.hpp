// tests/observe/trace_checks.hpp: reading a zhost trace (Note [Trace file]) in tests: events, and whether
// the complete events of each track nest.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

namespace zhost::testing {

nlohmann::json read_json_file(const std::filesystem::path& path);

// "" when on every (pid, tid) track each complete event either lies inside the one open before it or starts
// after it ends; else the first pair that overlaps.
std::string nesting_violation(const nlohmann::json& events);

}  // namespace zhost::testing
