// tests/fuzz/fuzz_checkpoint.cpp: libFuzzer target for the checkpoint reader (Note [Checkpoint layout]). The
// first byte picks which file the rest of the input becomes in an otherwise valid one-rank checkpoint of two
// parameters: checkpoint.json, rank-00000.json, or rank-00000.bin. The reader must refuse with one zhost error
// line or accept; an accepted checkpoint must then read every state of every parameter without a crash.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "host/checkpoint/checkpoint_format.hpp"
#include "tests/fuzz/fuzz_support.hpp"

namespace {

const std::vector<zhost::checkpoint::ParamShape> kParams = {{"a", {3, 2}}, {"b", {5}}};

// A valid checkpoint in `dir`, written once per process.
void write_valid(const std::string& dir) {
  zhost::checkpoint::ShardWriter writer(dir, 0, kParams);
  const std::vector<float> values(6, 1.5f);
  for (uint32_t p = 0; p < 2; ++p)
    for (const char* state : {"master", "exp_avg"}) writer.write(p, state, 0, values.data(), kParams[p].numel());
  writer.finish({{"rng_cpu", "00"}});
  zhost::checkpoint::write_checkpoint_json(
      dir, {{"format", zhost::checkpoint::kFormatName},
            {"version", zhost::checkpoint::kFormatVersion},
            {"world_size", 1},
            {"params", {{{"name", "a"}, {"shape", {3, 2}}}, {{"name", "b"}, {"shape", {5}}}}},
            {"states", {"master", "exp_avg"}},
            {"host", {{"step", 1}}}});
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  // A folder per fuzzing process, removed when it exits.
  static const struct Base {
    std::string path;
    ~Base() {
      std::error_code error;
      fs::remove_all(path, error);
    }
  } base_dir{[] {
    const std::string dir =
        (fs::temp_directory_path() / ("zhost-fuzz-checkpoint-" + std::to_string(::getpid()))).string();
    fs::create_directories(dir + "/valid");
    fs::create_directories(dir + "/case");
    write_valid(dir + "/valid");
    return dir;
  }()};
  const std::string& base = base_dir.path;
  static const char* kFiles[] = {"checkpoint.json", "rank-00000.json", "rank-00000.bin"};
  if (size == 0) return 0;
  const std::string dir = base + "/case";
  for (const char* file : kFiles)
    std::ofstream(dir + "/" + file, std::ios::binary | std::ios::trunc) << read_file(base + "/valid/" + file);
  std::ofstream(dir + "/" + kFiles[data[0] % 3], std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data + 1), static_cast<std::streamsize>(size - 1));
  zhost::fuzz::refuse_only_with_zhost_errors([&] {
    zhost::checkpoint::CheckpointReader reader(dir);
    for (int r = 0; r < reader.world_size(); ++r) reader.verify_rank_file(r);
    std::vector<float> out;
    for (const auto& param : reader.params())
      for (const std::string& state : reader.states()) {
        out.resize(static_cast<size_t>(param.numel()));
        reader.read(param.name, state, 0, param.numel(), out.data());
      }
  });
  return 0;
}
