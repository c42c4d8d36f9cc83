// zhost/kit/format.hpp: kit::format("... {} ...", args...), messages for plugin errors and logs without
// linking a formatting library into every plugin. Each "{}" takes the next argument as std::ostream
// prints it (bools as true/false); no format specs. Extra "{}" stay as they are; extra arguments are dropped.
#pragma once

#include <ios>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>

namespace zhost::kit {
namespace detail {

inline void append_pattern(std::ostringstream& out, std::string_view pattern) { out << pattern; }

template <typename First, typename... Rest>
void append_pattern(std::ostringstream& out, std::string_view pattern, First&& first, Rest&&... rest) {
  const size_t hole = pattern.find("{}");
  if (hole == std::string_view::npos) {
    out << pattern;
    return;
  }
  out << pattern.substr(0, hole) << std::forward<First>(first);
  append_pattern(out, pattern.substr(hole + 2), std::forward<Rest>(rest)...);
}

}  // namespace detail

template <typename... Args>
std::string format(std::string_view pattern, Args&&... args) {
  std::ostringstream out;
  out << std::boolalpha;
  detail::append_pattern(out, pattern, std::forward<Args>(args)...);
  return out.str();
}

}  // namespace zhost::kit
