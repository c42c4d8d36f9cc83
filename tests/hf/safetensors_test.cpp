// tests/hf/safetensors_test.cpp: the safetensors reader refuses every malformed file with one line naming
// the file and the problem (Note [safetensors layout]), reads what the writer wrote, and checks sharded
// sets against their index.
#include "host/formats/safetensors.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "host/core/error.hpp"
#include "tests/support/scratch_dir.hpp"

namespace zhost::formats {
namespace {

using zhost::testing::ScratchDir;

// A file: u64 length + header text (as given) + `data_bytes` bytes.
std::string file_bytes(const std::string& header, size_t data_bytes, uint64_t declared = UINT64_MAX) {
  const uint64_t n = declared == UINT64_MAX ? header.size() : declared;
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header + std::string(data_bytes, '\x01');
}

// Expects parse to refuse with a UsageError holding the file name and `phrase`, on one line.
void expect_refused(const std::string& bytes, const std::string& phrase) {
  try {
    SafetensorsHeader::parse(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), "bad.safetensors");
    ADD_FAILURE() << "accepted; expected: " << phrase;
  } catch (const UsageError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("'bad.safetensors'"), std::string::npos) << message;
    EXPECT_NE(message.find(phrase), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST(SafetensorsReader, RefusesEachKindOfDamage) {
  const std::string a = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  expect_refused(std::string(5, '\0'), "shorter than the 8-byte header length");
  expect_refused(file_bytes("{}", 0, kMaxHeaderBytes + 1), "above the");
  expect_refused(file_bytes("{" + a + "}", 8, 4096), "but the file ends after");
  expect_refused(file_bytes("{\"a\":", 0), "not valid JSON");
  expect_refused(file_bytes("[1,2]", 0), "not a JSON object");
  expect_refused(file_bytes(R"({"a":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", 8), "unknown dtype");
  expect_refused(file_bytes(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), "not a non-negative");
  expect_refused(file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})", 4), "need 8");
  expect_refused(file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8), "end before");
  expect_refused(file_bytes(R"({"a":{"dtype":"F32","shape":[2]}})", 8), "data_offsets");
  expect_refused(file_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", 8), "unknown field");
  expect_refused(file_bytes(R"({"a":{"dtype":"F32","shape":[4611686018427387904,8],"data_offsets":[0,8]}})", 8),
                 "too large");
  expect_refused(file_bytes(R"({"__metadata__":{"k":1}})", 0), "not a string");
  // Layout: overlap, hole, short and long data regions.
  expect_refused(file_bytes("{" + a + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12), "overlapping");
  expect_refused(file_bytes("{" + a + R"(,"b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})", 16), "hole of 4");
  expect_refused(file_bytes("{" + a + "}", 4), "need 8 bytes");
  expect_refused(file_bytes("{" + a + "}", 9), "cover only 8 bytes");
}

TEST(SafetensorsReader, ReadsWhatTheWriterWrote) {
  ScratchDir dir;
  const std::vector<float> values = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f};
  const std::vector<uint16_t> halves = {0x3c00, 0xc000};
  const std::string path = (dir.path() / "x.safetensors").string();
  write_safetensors(path,
                    {{"w", "F32", {2, 3}, values.data(), values.size() * 4},
                     {"h", "F16", {2}, halves.data(), 4},
                     {"empty", "F32", {0, 3}, nullptr, 0}},
                    {{"format", "pt"}});
  const SafetensorsFile file(path);
  EXPECT_EQ(file.header().metadata.at("format"), "pt");
  EXPECT_EQ(file.header().data_start % 8, 0u);
  const TensorEntry* w = file.header().find("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(file.data(*w), values.data(), 24), 0);
  const TensorEntry* h = file.header().find("h");
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(std::memcmp(file.data(*h), halves.data(), 4), 0);
  EXPECT_EQ(file.header().find("empty")->numel, 0);
  EXPECT_THROW(write_safetensors(path, {{"w", "F32", {2}, values.data(), 12}}), Error);  // bytes != shape
}

TEST(SafetensorsSet, ChecksShardsAgainstTheirIndex) {
  ScratchDir dir;
  const float one = 1.0f;
  write_safetensors((dir.path() / "s1.safetensors").string(), {{"a", "F32", {1}, &one, 4}});
  write_safetensors((dir.path() / "s2.safetensors").string(), {{"b", "F32", {1}, &one, 4}});
  write_safetensors((dir.path() / "s3.safetensors").string(), {{"c", "F32", {1}, &one, 4}, {"d", "F32", {1}, &one, 4}});
  const auto expect_set_refused = [&](const std::string& index, const std::string& phrase) {
    dir.write("model.safetensors.index.json", index);
    try {
      SafetensorsSet::open(dir.path().string());
      ADD_FAILURE() << "accepted " << index;
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
    }
  };
  dir.write("model.safetensors.index.json", R"({"weight_map":{"a":"s1.safetensors","b":"s2.safetensors"}})");
  const SafetensorsSet set = SafetensorsSet::open(dir.path().string());
  EXPECT_EQ(set.names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_NE(set.find("b").entry, nullptr);
  EXPECT_EQ(set.find("c").entry, nullptr);
  expect_set_refused(R"({"weight_map":{"a":"s1.safetensors","b":"s1.safetensors"}})", "does not hold it");
  expect_set_refused(R"({"weight_map":{"c":"s3.safetensors"}})", "gives to no shard");
  expect_set_refused(R"({"weight_map":{"a":"../s1.safetensors"}})", "not a file in the same folder");
  expect_set_refused(R"({"weight_map":{"a":"missing.safetensors"}})", "does not exist");
  expect_set_refused(R"({"weight_map":[]})", "no \"weight_map\" object");
  expect_set_refused("{", "not valid JSON");
  ScratchDir empty;
  EXPECT_THROW(SafetensorsSet::open(empty.path().string()), UsageError);
}

}  // namespace
}  // namespace zhost::formats
