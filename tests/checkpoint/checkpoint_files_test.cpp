// tests/checkpoint/checkpoint_files_test.cpp: the checkpoint files (Note [Checkpoint layout]) round-trip across
// any split into fragments, and every kind of damage is refused with a line naming the file; the folder
// protocol (Note [Checkpoint atomicity]) publishes, points `latest`, prunes and resolves as documented.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include "host/checkpoint/checkpoint_dir.hpp"
#include "host/checkpoint/checkpoint_format.hpp"
#include "host/core/error.hpp"
#include "tests/support/scratch_dir.hpp"

namespace zhost::checkpoint {
namespace {

namespace fs = std::filesystem;
using zhost::testing::ScratchDir;

const std::vector<ParamShape> kParams = {{"embed.weight", {7, 3}}, {"head.bias", {5}}, {"big", {1 << 20}}};
const std::vector<std::string> kStates = {"master", "exp_avg"};

// The value of element i of (param p, state s): distinct everywhere.
float value_of(size_t p, size_t s, int64_t i) { return static_cast<float>(p * 1000003 + s * 7919) + 0.25f * i; }

// Writes a checkpoint of kParams on `ranks` ranks, each (param, state) split into `ranks` contiguous pieces.
void write_checkpoint(const std::string& dir, int ranks) {
  for (int r = 0; r < ranks; ++r) {
    ShardWriter writer(dir, r, kParams);
    for (size_t p = 0; p < kParams.size(); ++p)
      for (size_t s = 0; s < kStates.size(); ++s) {
        const int64_t n = kParams[p].numel(), begin = n * r / ranks, end = n * (r + 1) / ranks;
        if (begin == end) continue;
        std::vector<float> values;
        for (int64_t i = begin; i < end; ++i) values.push_back(value_of(p, s, i));
        writer.write(static_cast<uint32_t>(p), kStates[s], begin, values.data(), end - begin);
      }
    writer.finish({{"rng_cpu", "00ff"}});
  }
  nlohmann::json params = nlohmann::json::array();
  for (const auto& p : kParams) params.push_back({{"name", p.name}, {"shape", p.shape}});
  write_checkpoint_json(dir, {{"format", kFormatName},
                              {"version", kFormatVersion},
                              {"world_size", ranks},
                              {"params", params},
                              {"states", kStates},
                              {"host", {{"step", 3}}}});
}

// The refusal message of opening (and fully verifying) `dir`; "" when it opens.
std::string refusal(const std::string& dir) {
  try {
    CheckpointReader reader(dir);
    for (int r = 0; r < reader.world_size(); ++r) reader.verify_rank_file(r);
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

TEST(CheckpointFiles, ReadsAnyRangeAcrossTheRanksThatWroteIt) {
  for (int ranks : {1, 2, 3}) {
    ScratchDir dir;
    write_checkpoint(dir.path().string(), ranks);
    CheckpointReader reader(dir.path().string());
    EXPECT_EQ(reader.world_size(), ranks);
    EXPECT_EQ(reader.states(), kStates);
    EXPECT_EQ(reader.rank_host(ranks - 1)["rng_cpu"], "00ff");
    // Ranges that straddle the writers' pieces, as a reader with another world size asks for them.
    for (size_t p = 0; p < kParams.size(); ++p)
      for (size_t s = 0; s < kStates.size(); ++s)
        for (int readers : {1, 2, 4}) {
          const int64_t n = kParams[p].numel();
          for (int k = 0; k < readers; ++k) {
            const int64_t begin = n * k / readers, end = n * (k + 1) / readers;
            std::vector<float> got(static_cast<size_t>(end - begin), -1.0f);
            reader.read(kParams[p].name, kStates[s], begin, end - begin, got.data());
            for (int64_t i = begin; i < end; ++i)
              ASSERT_EQ(got[static_cast<size_t>(i - begin)], value_of(p, s, i))
                  << kParams[p].name << " " << kStates[s] << " element " << i << " written by " << ranks << " ranks";
          }
        }
    EXPECT_EQ(refusal(dir.path().string()), "");
  }
}

TEST(CheckpointFiles, ReadingAnAbsentParameterOrStateNamesWhatIsMissing) {
  ScratchDir dir;
  write_checkpoint(dir.path().string(), 2);
  CheckpointReader reader(dir.path().string());
  float x = 0;
  try {
    reader.read("head.bias", "momentum_buffer", 0, 1, &x);
    FAIL() << "read an absent state";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("no 'momentum_buffer' state (it has: master, exp_avg)"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(reader.read("nope", "master", 0, 1, &x), UsageError);
}

// One kind of damage: what to do to the written checkpoint, and a phrase the refusal must contain.
struct Damage {
  const char* name;
  void (*apply)(const fs::path& dir);
  const char* expected;
};

void flip_byte(const fs::path& file, std::streamoff at) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(at);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x10);
  f.seekp(at);
  f.write(&c, 1);
}

void replace_in(const fs::path& file, const std::string& from, const std::string& to) {
  std::string text = zhost::testing::read_text_file(file);
  const size_t at = text.find(from);
  ASSERT_NE(at, std::string::npos) << from;
  text.replace(at, from.size(), to);
  std::ofstream(file, std::ios::binary | std::ios::trunc) << text;
}

const Damage kDamages[] = {
    {"TruncatedData",
     [](const fs::path& d) { fs::resize_file(d / "rank-00001.bin", fs::file_size(d / "rank-00001.bin") - 4); },
     "rank-00001.bin' has"},
    {"FlippedDataByte", [](const fs::path& d) { flip_byte(d / "rank-00000.bin", 4 << 20 | 17); }, "fails its checksum"},
    {"FlippedLastChunk",
     [](const fs::path& d) { flip_byte(d / "rank-00001.bin", fs::file_size(d / "rank-00001.bin") - 1); },
     "fails its checksum"},
    {"MissingRankIndex", [](const fs::path& d) { fs::remove(d / "rank-00001.json"); }, "is missing or unreadable"},
    {"MissingData", [](const fs::path& d) { fs::remove(d / "rank-00000.bin"); }, "rank-00000.bin' is missing"},
    {"MissingMetadata", [](const fs::path& d) { fs::remove(d / "checkpoint.json"); }, "is missing or unreadable"},
    {"TruncatedMetadata", [](const fs::path& d) { fs::resize_file(d / "checkpoint.json", 40); },
     "is not a JSON object"},
    {"TruncatedIndex", [](const fs::path& d) { fs::resize_file(d / "rank-00000.json", 100); }, "is not a JSON object"},
    {"OtherFormat", [](const fs::path& d) { replace_in(d / "checkpoint.json", "zhost-checkpoint", "other"); },
     "is not a zhost checkpoint"},
    {"NewerVersion", [](const fs::path& d) { replace_in(d / "checkpoint.json", "\"version\": 1", "\"version\": 9"); },
     "format version 9"},
    {"Overlap", [](const fs::path& d) { replace_in(d / "rank-00001.json", "\"offset\": 10", "\"offset\": 9"); },
     "an overlap"},
    {"Hole", [](const fs::path& d) { replace_in(d / "rank-00000.json", "\"numel\": 10", "\"numel\": 9"); }, "a hole"},
    {"FragmentPastItsFile",
     [](const fs::path& d) { replace_in(d / "rank-00001.json", "\"byte_offset\": 0", "\"byte_offset\": 99999999"); },
     "past the end of its data file"},
    {"DataFileOutside",
     [](const fs::path& d) { replace_in(d / "rank-00000.json", "\"rank-00000.bin\"", "\"../x.bin\""); },
     "outside the checkpoint"},
    {"UnknownParameter", [](const fs::path& d) { replace_in(d / "rank-00000.json", "\"head.bias\"", "\"tail.bias\""); },
     "unknown parameter 'tail.bias'"},
    {"WrongRank", [](const fs::path& d) { replace_in(d / "rank-00001.json", "\"rank\": 1", "\"rank\": 0"); },
     "belongs to another rank"},
    {"NegativeShape", [](const fs::path& d) { replace_in(d / "checkpoint.json", "5\n", "-5\n"); }, "malformed shape"},
};

void PrintTo(const Damage& damage, std::ostream* out) { *out << damage.name; }

class DamagedCheckpoint : public ::testing::TestWithParam<Damage> {};

TEST_P(DamagedCheckpoint, IsRefusedNamingTheFile) {
  ScratchDir dir;
  write_checkpoint(dir.path().string(), 2);
  GetParam().apply(dir.path());
  const std::string message = refusal(dir.path().string());
  EXPECT_NE(message.find(GetParam().expected), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
}

INSTANTIATE_TEST_SUITE_P(Kinds, DamagedCheckpoint, ::testing::ValuesIn(kDamages),
                         [](const ::testing::TestParamInfo<Damage>& d) { return std::string(d.param.name); });

TEST(CheckpointFolders, PublishMovesLatestOnlyAfterTheFolderIsCompleteAndPrunesTheOldest) {
  ScratchDir dir;
  const std::string root = (dir.path() / "ckpt").string();
  EXPECT_THROW(resolve_checkpoint("latest", root), UsageError);
  for (int64_t step : {3, 6, 9}) {
    const std::string staging = begin_staging(root, step);
    write_checkpoint(staging, 1);
    EXPECT_FALSE(fs::exists(fs::path(root) / step_dir_name(step)));  // invisible until published
    publish(root, step);
    prune(root, 2);
    EXPECT_EQ(resolve_checkpoint("latest", root), (fs::path(root) / step_dir_name(step)).string());
    EXPECT_EQ(resolve_checkpoint(root, "elsewhere"), (fs::path(root) / step_dir_name(step)).string());
  }
  const std::vector<std::string> kept = list_checkpoints(root);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(fs::path(kept[0]).filename(), "step-00000006");
  EXPECT_EQ(fs::path(kept[1]).filename(), "step-00000009");
  // A save that died half way leaves a staging folder: invisible to resume, removed by the next save.
  const std::string stale = begin_staging(root, 12);
  write_checkpoint(stale, 1);
  EXPECT_EQ(resolve_checkpoint("latest", root), (fs::path(root) / "step-00000009").string());
  begin_staging(root, 15);
  EXPECT_FALSE(fs::exists(stale));
  discard_staging(root, 15);
  EXPECT_EQ(fs::path(resolve_checkpoint((fs::path(root) / "step-00000006").string(), root)).filename(),
            "step-00000006");
  EXPECT_THROW(resolve_checkpoint((dir.path() / "nope").string(), root), UsageError);
  // --resume CKPT_DIR/latest, the pointer file DeepSpeed users know: read as its folder would be.
  EXPECT_EQ(resolve_checkpoint((fs::path(root) / "latest").string(), "elsewhere"),
            (fs::path(root) / "step-00000009").string());
}

}  // namespace
}  // namespace zhost::checkpoint
