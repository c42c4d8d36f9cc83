// host/config/document/import_toml.hpp: a DeepSpeed JSON config written out as zhost TOML (`zhost config import`),
// each key with a comment naming the DeepSpeed key it came from, and the keys noted or refused listed as
// comments at the top. Checking the TOML gives the same resolved config as checking the JSON.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "host/config/document/document.hpp"

namespace zhost::config {

// `active(path)`: false for a key this config does not read (DeepSpeed ignores it, and the TOML would be
// refused for it), which is written as a comment. `problems`: lines to list as refused at the top.
std::string imported_toml(const Document& document, const std::function<bool(const std::string&)>& active,
                          const std::vector<std::string>& problems = {});

}  // namespace zhost::config
