// host/plugins/discovery.cpp: the plugin search path and the scan of its directories.
#include "host/plugins/discovery.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <set>

#include "host/core/error.hpp"
#include "host/plugins/probe.hpp"

namespace zhost {
namespace fs = std::filesystem;

fs::path installed_plugin_dir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  return exe.parent_path().parent_path() / "lib" / "zhost" / "plugins";
}

std::optional<std::string> plugin_dir_problem(const fs::path& dir) {
  std::error_code ec;
  const fs::file_status status = fs::status(dir, ec);
  if (fs::is_directory(status)) return std::nullopt;
  if (status.type() == fs::file_type::not_found) return std::string("does not exist");
  if (ec) return "cannot be read (" + ec.message() + ")";
  return std::string("is not a folder");
}

std::vector<fs::path> plugin_search_path(const std::vector<std::string>& config_dirs) {
  std::vector<fs::path> path;
  for (const auto& dir : config_dirs) path.emplace_back(dir);
  if (const char* env = std::getenv("ZHOST_PLUGIN_PATH")) {
    std::string list = env;
    size_t start = 0;
    while (start <= list.size()) {
      size_t end = list.find(':', start);
      if (end == std::string::npos) end = list.size();
      if (end > start) {
        fs::path dir = list.substr(start, end - start);
        if (auto problem = plugin_dir_problem(dir))
          fail_usage("ZHOST_PLUGIN_PATH names '{}', which {}; fix or unset ZHOST_PLUGIN_PATH", dir.string(), *problem);
        path.push_back(std::move(dir));
      }
      start = end + 1;
    }
  }
  if (fs::path installed = installed_plugin_dir(); !installed.empty()) path.push_back(installed);
  // The same directory listed twice is searched once.
  std::vector<fs::path> unique;
  std::set<std::string> seen;
  for (auto& dir : path) {
    std::error_code ec;
    fs::path canonical = fs::weakly_canonical(dir, ec);
    if (seen.insert((ec ? dir : canonical).string()).second) unique.push_back(dir);
  }
  return unique;
}

Discovery discover_plugins(const std::vector<fs::path>& search_path, const PluginLoader& loader,
                           std::chrono::milliseconds probe_deadline) {
  Discovery discovery;
  discovery.searched = search_path;
  for (const auto& dir : search_path) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) continue;
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("zhost_", 0) == 0 && entry.path().extension() == ".so") files.push_back(entry.path());
    }
    std::sort(files.begin(), files.end());
    for (const auto& file : files) {
      try {
        if (std::optional<std::string> failure = probe_plugin_file(file, loader, probe_deadline)) {
          discovery.failures.push_back(std::move(*failure));
          continue;
        }
        LoadedPlugin plugin = loader.load(file);
        note_plugin_file_loaded(file);
        auto same = std::find_if(discovery.plugins.begin(), discovery.plugins.end(),
                                 [&](const LoadedPlugin& p) { return p.info.name == plugin.info.name; });
        if (same != discovery.plugins.end()) {
          discovery.shadowed.push_back(
              fmt::format("plugin {}: '{}' is shadowed by {}, found earlier in the search path", file.string(),
                          plugin.info.name, same->path.string()));
          continue;
        }
        discovery.plugins.push_back(std::move(plugin));
      } catch (const Error& e) {
        discovery.failures.emplace_back(e.what());
      }
    }
  }
  // Built-in plugins come last: a plugin file of the same name found on the search path replaces one.
  for (const auto& builtin : builtin_plugins()) {
    try {
      LoadedPlugin plugin = loader.load_builtin(builtin);
      bool shadowed = std::any_of(discovery.plugins.begin(), discovery.plugins.end(),
                                  [&](const LoadedPlugin& p) { return p.info.name == plugin.info.name; });
      if (!shadowed) discovery.plugins.push_back(std::move(plugin));
    } catch (const Error& e) {
      discovery.failures.emplace_back(e.what());
    }
  }
  return discovery;
}

void require_no_failures(const Discovery& discovery) {
  if (discovery.failures.empty()) return;
  std::string more = discovery.failures.size() > 1 ? fmt::format(" (and {} more failing plugins: see `zhost plugins`)",
                                                                 discovery.failures.size() - 1)
                                                   : "";
  throw UsageError(discovery.failures.front() + more);
}

}  // namespace zhost
