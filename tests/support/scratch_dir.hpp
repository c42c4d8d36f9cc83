// tests/support/scratch_dir.hpp: a fresh folder under /tmp for one test, removed with its contents at the
// end, and reading a test's output files. Every test uses this one helper. Removal goes through POSIX nftw rather than
// std::filesystem::remove_all: pip's LibTorch 2.x exports its own copy of that function, which replaces
// libstdc++'s at run time and crashes test binaries that link it.
#pragma once

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

namespace zhost::testing {

class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = "/tmp/zhost-test-XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed for " + pattern);
    path_ = pattern;
  }
  ~ScratchDir() {
    ::nftw(
        path_.c_str(), [](const char* file, const struct stat*, int, struct FTW*) { return ::remove(file); }, 16,
        FTW_DEPTH | FTW_PHYS);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

  // Writes `bytes` to path()/name (creating folders) and returns the file's path.
  std::string write(const std::string& name, const std::string& bytes) const {
    const std::filesystem::path file = path_ / name;
    std::filesystem::create_directories(file.parent_path());
    std::ofstream(file, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return file.string();
  }

 private:
  std::filesystem::path path_;
};

// The whole content of a text file ("" when it cannot be read).
inline std::string read_text_file(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// How many times `needle` starts in `text` (overlapping ones included): a log line expected once, twice...
inline int count_occurrences(const std::string& text, const std::string& needle) {
  int n = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) ++n;
  return n;
}

}  // namespace zhost::testing
