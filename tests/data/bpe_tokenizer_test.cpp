// tests/data/bpe_tokenizer_test.cpp: data.tokenizer as an HF tokenizer.json of byte-level BPE
// (host/data/bpe_tokenizer.hpp). No real tokenizer.json can be had on this machine, so bpe_reference.py trains
// some with Hugging Face's tokenizers (GPT-2's format, with legacy "a b" merges, with add_prefix_space, and with
// bytes missing from the vocab under unk_token, fused or not; and Llama 3's) on 4 MiB of the machine's license texts
// (300 kB for the other tests), and writes the ids HF gives for that text and for 300k random characters. Then
// - zhost's ids equal HF's, token for token, for each (the first differing position is shown), with tokens/s of
//   both printed; and on the random text;
// - the pieces zhost's GPT-2 and Llama 3 splits cut equal HF's pre-tokenizers', on both texts;
// - a folder is read through its tokenizer.json; the data loader's samples are windows of HF's ids of the
//   whole file, newlines included;
// - bytes that are not UTF-8 are encoded one by one;
// - malformed and unsupported tokenizer.json files are one-line UsageErrors naming what is wrong;
// - a gpt trains on text through a tokenizer.json with `zhost run`.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "host/core/error.hpp"
#include "host/data/data.hpp"
#include "host/data/pretokenizer.hpp"
#include "host/data/tokenizer.hpp"
#include "tests/support/reference_python.hpp"
#include "tests/support/scratch_dir.hpp"
#include "tests/training/training_test_support.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using zhost::data::Tokenizer;
using zhost::testing::ScratchDir;

namespace {

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<uint32_t> read_ids(const fs::path& path) {
  const std::string bytes = read_file(path);
  std::vector<uint32_t> ids(bytes.size() / 4);
  std::memcpy(ids.data(), bytes.data(), ids.size() * 4);
  return ids;
}

// bpe_reference.py's output for `args`, made once per process.
struct Reference {
  Reference(const std::string& args) {
    const std::string python = zhost::testing::reference_python();
    const std::string command = "'" + python + "' " ZHOST_SOURCE_DIR "/tests/data/bpe_reference.py " +
                                dir.path().string() + " " + args + " > " + (dir.path() / "report.json").string() +
                                " 2> " + (dir.path() / "err.txt").string();
    ok = std::system(command.c_str()) == 0;
    if (ok) {
      report = json::parse(read_file(dir.path() / "report.json"));
    } else {
      error = python + " could not make the reference (scripts/setup-deps installs tokenizers into $ZHOST_VENV): " +
              read_file(dir.path() / "err.txt");
    }
  }
  fs::path file(const std::string& name) const { return dir.path() / name; }
  ScratchDir dir;
  bool ok = false;
  std::string error;
  json report;
};

// 4 MiB of text, 8000 tokens: the equality test's.
const Reference& four_mib() {
  static const Reference reference("");
  return reference;
}

// 300 kB of text, 320 tokens: enough to train on, quick to make.
const Reference& small() {
  static const Reference reference("--bytes 300000 --vocab 320");
  return reference;
}

double thread_cpu_seconds() {
  timespec now{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
}

// "" when equal; else the first differing position, with the values (ids, piece lengths) around it.
std::string first_difference(const std::vector<uint32_t>& expected, const std::vector<uint32_t>& got,
                             const char* what = "ids") {
  const size_t common = std::min(expected.size(), got.size());
  size_t at = 0;
  while (at < common && expected[at] == got[at]) ++at;
  if (at == common && expected.size() == got.size()) return "";
  std::ostringstream out;
  out << "HF gives " << expected.size() << " " << what << ", zhost " << got.size() << "; first difference at " << at
      << ":\n  HF:   ";
  for (size_t i = at >= 5 ? at - 5 : 0; i < std::min(expected.size(), at + 6); ++i) out << expected[i] << ' ';
  out << "\n  zhost: ";
  for (size_t i = at >= 5 ? at - 5 : 0; i < std::min(got.size(), at + 6); ++i) out << got[i] << ' ';
  return out.str();
}

TEST(BpeTokenizer, IdsEqualHfTokenizersOnLicenseTexts) {
  const Reference& reference = four_mib();
  ASSERT_TRUE(reference.ok) << reference.error;
  const std::string text = read_file(reference.file("corpus.txt"));
  ASSERT_GT(text.size(), 4u << 20);
  for (const char* kind : {"gpt2", "gpt2-legacy", "gpt2-prefix", "llama3", "unk", "unk-fused"}) {
    SCOPED_TRACE(kind);
    const std::vector<uint32_t> expected = read_ids(reference.file(std::string(kind) + ".ids"));
    ASSERT_GT(expected.size(), 500000u);
    const Tokenizer tokenizer(reference.file(std::string(kind) + ".json").string());
    EXPECT_EQ(tokenizer.vocab(), reference.report[kind]["vocab"].get<int64_t>());
    std::vector<uint32_t> ids;
    const auto start = std::chrono::steady_clock::now();
    const double start_cpu = thread_cpu_seconds();
    tokenizer.encode(text, ids);
    const double cpu_seconds = thread_cpu_seconds() - start_cpu;
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const std::string difference = first_difference(expected, ids);
    EXPECT_TRUE(difference.empty()) << kind << ": " << difference;
    if (difference.empty()) {
      const json& hf = reference.report[kind];
      const auto tokens = static_cast<double>(ids.size());
      std::printf(
          "%s: %zu bytes, %zu ids equal to HF's; tokens/s zhost %.3gM, HF tokenizers %.3gM (%.1fx) wall-clock, "
          "zhost %.3gM, HF %.3gM (%.1fx) CPU time\n",
          kind, text.size(), ids.size(), tokens / seconds / 1e6, tokens / hf["seconds"].get<double>() / 1e6,
          hf["seconds"].get<double>() / seconds, tokens / cpu_seconds / 1e6,
          tokens / hf["cpu_seconds"].get<double>() / 1e6, hf["cpu_seconds"].get<double>() / cpu_seconds);
    }
  }
}

// The cases the split regexes tell apart, many times over in random order (bpe_reference.py's random.txt).
TEST(BpeTokenizer, IdsEqualHfTokenizersOnRandomUnicode) {
  const Reference& reference = small();
  ASSERT_TRUE(reference.ok) << reference.error;
  const std::string text = read_file(reference.file("random.txt"));
  for (const char* kind : {"gpt2", "gpt2-legacy", "gpt2-prefix", "llama3", "unk", "unk-fused"}) {
    const std::vector<uint32_t> expected = read_ids(reference.file(std::string(kind) + ".random.ids"));
    ASSERT_GT(expected.size(), 100000u);
    std::vector<uint32_t> ids;
    Tokenizer(reference.file(std::string(kind) + ".json").string()).encode(text, ids);
    const std::string difference = first_difference(expected, ids);
    EXPECT_TRUE(difference.empty()) << kind << ": " << difference;
  }
}

// The pieces zhost's splitter cuts, as byte lengths.
std::vector<uint32_t> piece_lengths(zhost::data::SplitPattern pattern, std::string_view text) {
  std::vector<uint32_t> lengths;
  zhost::data::PreTokenizer pieces(pattern, text);
  for (std::string_view piece; pieces.next(piece);) lengths.push_back(static_cast<uint32_t>(piece.size()));
  return lengths;
}

// The split regexes alone, where a difference cannot hide behind merges that happen to give the same ids.
TEST(BpeTokenizer, PiecesEqualHfPreTokenizers) {
  const Reference& reference = small();
  ASSERT_TRUE(reference.ok) << reference.error;
  for (const char* text_name : {"corpus", "random"}) {
    const std::string text = read_file(reference.file(std::string(text_name) + ".txt"));
    for (const auto& [kind, pattern] : {std::pair("gpt2", zhost::data::SplitPattern::kGpt2),
                                        std::pair("llama3", zhost::data::SplitPattern::kLlama3)}) {
      const std::string suffix = std::string(text_name) == "random" ? ".random.pieces" : ".pieces";
      const std::vector<uint32_t> expected = read_ids(reference.file(kind + suffix));
      ASSERT_GT(expected.size(), 50000u);
      const std::string difference = first_difference(expected, piece_lengths(pattern, text), "pieces");
      EXPECT_TRUE(difference.empty()) << kind << " on " << text_name << ".txt, piece lengths in bytes: " << difference;
    }
  }
}

// A small valid tokenizer.json, for the refusals to break one thing each.
json small_tokenizer() {
  return json::parse(R"({
    "version": "1.0", "truncation": null, "padding": null, "added_tokens": [], "normalizer": null,
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
    "post_processor": null, "decoder": null,
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
              "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
              "vocab": {"a": 0, "b": 1, "ab": 2, "Ġ": 3}, "merges": [["a", "b"]]}
  })");
}

TEST(BpeTokenizer, AFolderIsReadThroughItsTokenizerJson) {
  ScratchDir dir;
  std::ofstream(dir.path() / "tokenizer.json") << small_tokenizer().dump();
  std::ofstream(dir.path() / "tokenizer.model") << "not a SentencePiece model";
  const Tokenizer tokenizer(dir.path().string());
  EXPECT_EQ(tokenizer.file(), (dir.path() / "tokenizer.json").string());
  std::vector<uint32_t> ids;
  tokenizer.encode("ab ab", ids);
  EXPECT_EQ(ids, (std::vector<uint32_t>{2, 3, 2}));

  fs::remove(dir.path() / "tokenizer.json");
  fs::remove(dir.path() / "tokenizer.model");
  try {
    const Tokenizer none(dir.path().string());
    FAIL() << "a folder without a tokenizer was accepted";
  } catch (const zhost::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("holds neither tokenizer.json nor tokenizer.model"), std::string::npos)
        << e.what();
  }
}

// data.type = "text" with the tokenizer's folder: each file's ids are HF's ids of the whole file.
TEST(BpeTokenizer, SamplesAreWindowsOfHfIdsOfTheWholeFile) {
  const Reference& reference = small();
  ASSERT_TRUE(reference.ok) << reference.error;
  ScratchDir dir;
  fs::create_directories(dir.path() / "model");
  fs::copy_file(reference.file("gpt2.json"), dir.path() / "model/tokenizer.json");
  const std::vector<uint32_t> expected = read_ids(reference.file("gpt2.ids"));
  zhost::data::DataSpec spec;
  spec.source = "text";
  spec.path = reference.file("corpus.txt").string();
  spec.tokenizer = (dir.path() / "model").string();
  spec.vocab = 320;
  spec.seq_len = 64;
  spec.micro_batch = 4;
  spec.seed = 5;
  zhost::data::DataLoader loader(spec);
  EXPECT_EQ(loader.corpus_tokens(), static_cast<int64_t>(expected.size()));
  for (int64_t step = 0; step < 3; ++step) {
    const zhost::data::Batch batch = loader.next(step, 0);
    for (int64_t j = 0; j < batch.tokens.size(0); ++j) {
      const int64_t* ids = batch.tokens[j].data_ptr<int64_t>();
      const auto at = std::search(expected.begin(), expected.end(), ids, ids + 64,
                                  [](uint32_t a, int64_t b) { return static_cast<int64_t>(a) == b; });
      ASSERT_NE(at, expected.end()) << "sample " << j << " of step " << step << " is no window of HF's ids";
    }
  }
  spec.vocab = 319;
  try {
    zhost::data::DataLoader small(spec);
    FAIL() << "a vocab below the tokenizer's was accepted";
  } catch (const zhost::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("has 320 pieces, but the model's vocab is 319"), std::string::npos)
        << e.what();
  }
}

// The UsageError `file` gives, checked to be one line.
std::string refusal(const fs::path& file) {
  try {
    const Tokenizer tokenizer(file.string());
  } catch (const zhost::UsageError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.find('\n'), std::string::npos) << "not one line: " << message;
    return message;
  }
  ADD_FAILURE() << file << " was accepted";
  return "";
}

// HF's Python API takes no such text; zhost splits invalid bytes as punctuation and encodes them byte by byte.
TEST(BpeTokenizer, BytesThatAreNotUtf8AreEncodedOneByOne) {
  ScratchDir dir;
  json tokenizer = small_tokenizer();
  tokenizer["model"]["vocab"]["\u00ff"] = 4;  // byte 0xFF's character
  tokenizer["model"]["vocab"]["\u00fe"] = 5;  // byte 0xFE's
  std::ofstream(dir.path() / "tokenizer.json") << tokenizer.dump();
  const Tokenizer bpe((dir.path() / "tokenizer.json").string());
  std::vector<uint32_t> ids;
  bpe.encode("ab\xff\xfe ab\xff", ids);
  EXPECT_EQ(ids, (std::vector<uint32_t>{2, 4, 5, 3, 2, 4}));
}

TEST(BpeTokenizer, MalformedOrUnsupportedFilesAreClearUsageErrors) {
  ScratchDir dir;
  const fs::path file = dir.path() / "tokenizer.json";
  std::ofstream(file) << small_tokenizer().dump();
  std::vector<uint32_t> ids;
  Tokenizer(file.string()).encode("ab ab", ids);
  EXPECT_EQ(ids, (std::vector<uint32_t>{2, 3, 2})) << "the valid file the refusals start from";

  const auto expect_refused = [&](const std::string& text, const std::string& expected) {
    std::ofstream(file, std::ios::trunc) << text;
    const std::string message = refusal(file);
    EXPECT_NE(message.find(expected), std::string::npos) << "for " << text.substr(0, 200) << "\n got: " << message;
  };
  const auto with = [](const json::json_pointer& where, const json& value) {
    json tokenizer = small_tokenizer();
    tokenizer[where] = value;
    return tokenizer.dump();
  };
  expect_refused("{\"model\": ", "is not JSON");
  expect_refused("[1, 2]", "has no \"model\" object, so it is no tokenizer.json");
  expect_refused(with("/model/type"_json_pointer, "WordPiece"), "model type \"WordPiece\" is not supported");
  expect_refused(with("/normalizer"_json_pointer, {{"type", "NFC"}}), "normalizer NFC is not supported");
  expect_refused(with("/pre_tokenizer"_json_pointer, {{"type", "Whitespace"}}),
                 "pre_tokenizer Whitespace is not supported (only ByteLevel, or Sequence [Split, ByteLevel])");
  expect_refused(with("/pre_tokenizer"_json_pointer, json::parse(R"({"type": "Sequence", "pretokenizers": [
                        {"type": "Split", "pattern": {"Regex": "\\s+"}, "behavior": "Isolated", "invert": false},
                        {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false}]})")),
                 "pre_tokenizer Split with pattern {\"Regex\":\"\\\\s+\"} is not supported (zhost knows GPT-2's and "
                 "Llama 3's regexes)");
  expect_refused(with("/model/dropout"_json_pointer, 0.1), "model.dropout = 0.1 is not supported");
  expect_refused(with("/model/byte_fallback"_json_pointer, true), "model.byte_fallback = true is not supported");
  expect_refused(with("/model/continuing_subword_prefix"_json_pointer, "##"),
                 "model.continuing_subword_prefix = \"##\" is not supported");
  expect_refused(with("/model/merges"_json_pointer, json::parse(R"([["a", "c"]])")),
                 "model.merges[0] makes or uses \"c\", which is not in model.vocab");
  expect_refused(with("/model/merges"_json_pointer, json::parse(R"(["a b", "ab"])")),
                 "model.merges[1] = \"ab\" is not a pair of tokens");
  expect_refused(with("/model/vocab"_json_pointer, json::parse(R"({"a": -1})")),
                 "model.vocab gives \"a\" the id -1, not an id");
  expect_refused(
      with("/pre_tokenizer/use_regex"_json_pointer, "yes"),
      "a field has an unexpected type ([json.exception.type_error.302] type must be boolean, but is string)");
  expect_refused(with("/added_tokens"_json_pointer, json::parse(R"([{"id": 4, "content": "<s>", "lstrip": true}])")),
                 "added token \"<s>\" has lstrip set, which is not supported");
  // Every refusal says what zhost reads instead.
  expect_refused(with("/model/type"_json_pointer, "Unigram"),
                 "zhost reads byte-level BPE tokenizer.json files like GPT-2's and Llama 3's, and SentencePiece "
                 "tokenizer.model files (or tokenize beforehand and use data.type = \"tokens\")");
  EXPECT_NE(refusal(dir.path() / "missing.json")
                .find("missing.json' is not a file; point it at the model's "
                      "tokenizer.json (byte-level BPE) or tokenizer.model"),
            std::string::npos);
}

TEST(BpeTokenizer, AGptTrainsOnTextThroughATokenizerJson) {
  const Reference& reference = small();
  ASSERT_TRUE(reference.ok) << reference.error;
  ScratchDir dir;
  fs::create_directories(dir.path() / "text");
  fs::copy_file(reference.file("corpus.txt"), dir.path() / "text/corpus.txt");
  const zhost::testing::RunOutput run = zhost::testing::run_zhost(
      dir.path(), zhost::testing::small_job_config(), "bpe",
      "--set model.vocab=320 --set steps=60 --set data.type=text --set data.path=" + (dir.path() / "text").string() +
          " --set data.tokenizer=" + reference.file("gpt2.json").string() + " --set train_micro_batch_size_per_gpu=4");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  ASSERT_EQ(run.losses.size(), 60u);
  // From about ln(320) = 5.8 at the start; measured once: 5.77, then 4.48 at step 60.
  EXPECT_GT(run.losses.front(), 5.4);
  EXPECT_LT(run.losses.back(), run.losses.front() - 0.4) << "the loss did not fall";
}

}  // namespace
