// host/plugins/probe.hpp: loading a plugin file in a child process before loading it into zhost.
//
// zhost runs plugins in its own process by design (docs/abi.md, "What zhost protects against"), so a
// plugin's code can crash or hang zhost once loaded. Listing the search path must not: any zhost_*.so
// found there is first loaded and negotiated in a forked child (its constructors, its entry function, the
// descriptor checks), which reports the outcome through a pipe within a deadline. Only a file that loaded
// cleanly there is then loaded into this process; a file that crashed, hung or failed becomes one failure
// line naming it, and the caller goes on with the others.
#pragma once

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>

#include "host/plugins/loader.hpp"

namespace zhost {

// How long loading one plugin file in the child may take.
inline constexpr std::chrono::milliseconds kPluginProbeDeadline{10000};

// A file that this process (or the launcher it was forked from: Note [Forked ranks]) has already loaded
// without harm is not probed again: note_plugin_file_loaded() records it, by device, inode, size and
// modification time, so that a file replaced since is probed anew.
void note_plugin_file_loaded(const std::filesystem::path& file);

// nullopt when `loader.load(file)` succeeded in a child process, or the file loaded in this process before;
// else its failure line ("plugin FILE: ...").
std::optional<std::string> probe_plugin_file(const std::filesystem::path& file, const PluginLoader& loader,
                                             std::chrono::milliseconds deadline = kPluginProbeDeadline);

}  // namespace zhost
