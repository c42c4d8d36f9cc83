// host/data/token_source.cpp: the synthetic, token-file and text sources: memory maps of the files
// (formats::MappedFile), counter-based xxHash sampling, and one-line UsageErrors that say what to do about a bad file.
#include "host/data/token_source.hpp"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "host/core/error.hpp"
#include "host/data/tokenizer.hpp"
#include "host/formats/mapped_file.hpp"

namespace zhost::data {
namespace {

namespace fs = std::filesystem;

// The hash every source samples with: xxHash3 of the given words, seeded with the data seed.
template <size_t N>
uint64_t hash_words(uint64_t seed, const int64_t (&words)[N]) {
  return XXH3_64bits_withSeed(words, sizeof(words), seed);
}

// Token ids checked when a corpus opens (32 MB of uint16 ids), in chunks of this many.
constexpr int64_t kIdsCheckedAtOpen = int64_t{1} << 24;
constexpr int64_t kIdCheckChunk = int64_t{1} << 16;

// The corpus files: memory-mapped, read at random offsets (formats::MappedFile).
struct MappedCorpusFile : formats::MappedFile {
  // `random_access`: read at random offsets (samples); else once from start to end (a tokenizer), with read-ahead.
  MappedCorpusFile(const std::string& path, const char* what, bool random_access = true)
      : formats::MappedFile(path, what, "data path") {
    if (random_access) advise_random();
  }
};
using MappedFile = MappedCorpusFile;

class SyntheticSource final : public TokenSource {
 public:
  explicit SyntheticSource(const SourceParams& params) : params_(params) {}

  void read_sample(int64_t step, int64_t index, int64_t* out) const override {
    const auto vocab = static_cast<uint64_t>(params_.vocab);
    for (int64_t position = 0; position <= params_.seq_len; ++position) {
      out[position] = static_cast<int64_t>(hash_words(params_.seed, {step, index, position}) % vocab);
    }
  }
  int64_t corpus_tokens() const override { return 0; }

 private:
  SourceParams params_;
};

// Token ids in memory, as a corpus reads them: a mapped file's bytes, or the ids a tokenizer made of a text file.
struct TokenRun {
  const unsigned char* data = nullptr;
  size_t size = 0;   // bytes, a whole number of ids
  std::string path;  // the file the ids come from, for messages
};

// A corpus of token ids in one or more runs, read as one concatenated sequence. `owner` keeps the runs' memory.
class CorpusSource final : public TokenSource {
 public:
  // `files`: non-empty, each a whole number of tokens. `what` names the corpus in messages.
  CorpusSource(std::vector<TokenRun> files, std::shared_ptr<const void> owner, int token_bytes,
               const SourceParams& params, std::string what)
      : files_(std::move(files)),
        owner_(std::move(owner)),
        token_bytes_(token_bytes),
        params_(params),
        what_(std::move(what)) {
    for (const TokenRun& file : files_) {
      starts_.push_back(total_tokens_);
      total_tokens_ += static_cast<int64_t>(file.size) / token_bytes_;
    }
    if (total_tokens_ < params_.seq_len + 1) {
      fail_usage("{} holds {} tokens, but one sample needs seq_len + 1 = {}; use more data or a shorter seq_len", what_,
                 total_tokens_, params_.seq_len + 1);
    }
    check_first_ids();
  }

  void read_sample(int64_t step, int64_t index, int64_t* out) const override {
    const auto windows = static_cast<uint64_t>(total_tokens_ - params_.seq_len);  // possible start offsets
    const auto start = static_cast<int64_t>(hash_words(params_.seed, {step, index}) % windows);
    read_tokens(start, params_.seq_len + 1, out);
  }
  int64_t corpus_tokens() const override { return total_tokens_; }

 private:
  // Ids at or above vocab (a vocab too small for the tokenizer, or uint32 ids read as uint16) show within the
  // first tokens: check those when the source opens, so that the job stops before training. Later ids are
  // checked as samples read them.
  void check_first_ids() const {
    std::vector<int64_t> ids;
    for (int64_t first = 0; first < std::min(total_tokens_, kIdsCheckedAtOpen); first += kIdCheckChunk) {
      ids.resize(static_cast<size_t>(std::min(kIdCheckChunk, total_tokens_ - first)));
      read_tokens(first, static_cast<int64_t>(ids.size()), ids.data());
    }
  }

  // Copies tokens [first, first + count) of the concatenated files to out, checking each id < vocab.
  void read_tokens(int64_t first, int64_t count, int64_t* out) const {
    // the file holding `first`: the last one starting at or before it
    size_t file = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), first) - starts_.begin()) - 1;
    int64_t position = first;
    while (count > 0) {
      const int64_t file_tokens = static_cast<int64_t>(files_[file].size) / token_bytes_;
      const int64_t offset = position - starts_[file];
      const int64_t n = std::min(count, file_tokens - offset);
      const unsigned char* bytes = files_[file].data + offset * token_bytes_;
      for (int64_t i = 0; i < n; ++i) out[i] = decode(bytes + i * token_bytes_);
      for (int64_t i = 0; i < n; ++i) {
        if (out[i] >= params_.vocab) report_bad_id(files_[file].path, offset + i, out[i]);
      }
      out += n;
      position += n;
      count -= n;
      ++file;
    }
  }

  int64_t decode(const unsigned char* bytes) const {
    switch (token_bytes_) {
      case 1:
        return bytes[0];
      case 2: {
        uint16_t id;
        std::memcpy(&id, bytes, sizeof(id));
        return id;
      }
      default: {
        uint32_t id;
        std::memcpy(&id, bytes, sizeof(id));
        return id;
      }
    }
  }

  [[noreturn]] void report_bad_id(const std::string& path, int64_t token, int64_t id) const {
    fail_usage(
        "'{}' holds token id {} at token {}, but model.vocab is {}; raise model.vocab above the largest id, "
        "or check data.token_dtype (uint16 vs uint32)",
        path, id, token, params_.vocab);
  }

  std::vector<TokenRun> files_;
  std::shared_ptr<const void> owner_;
  std::vector<int64_t> starts_;  // token index where each file starts in the concatenation
  int64_t total_tokens_ = 0;
  int token_bytes_;
  SourceParams params_;
  std::string what_;
};

// Mapped files as a corpus's runs; the corpus keeps the mappings.
std::unique_ptr<TokenSource> mapped_corpus(std::vector<MappedFile> files, int token_bytes, const SourceParams& params,
                                           std::string what) {
  auto owner = std::make_shared<std::vector<MappedFile>>(std::move(files));
  std::vector<TokenRun> runs;
  for (const MappedFile& file : *owner) runs.push_back({file.data(), file.size(), file.path()});
  return std::make_unique<CorpusSource>(std::move(runs), owner, token_bytes, params, std::move(what));
}

// A text path's files: the file, or a folder's non-empty regular files in sorted name order.
std::vector<MappedFile> text_files(const std::string& path, bool random_access) {
  if (path.empty()) fail_usage("the text data source needs a path: a text file or a folder of text files");
  std::error_code error;
  if (!fs::exists(path, error)) fail_usage("text path '{}' does not exist; check the data path", path);
  std::vector<MappedFile> files;
  if (fs::is_directory(path, error)) {
    std::vector<std::string> names;
    for (const fs::directory_entry& entry : fs::directory_iterator(path)) {
      if (entry.is_regular_file()) names.push_back(entry.path().string());
    }
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      MappedFile file(name, "text file", random_access);
      if (file.size() > 0) files.push_back(std::move(file));
    }
    if (files.empty()) fail_usage("text folder '{}' has no non-empty regular files; put the text files in it", path);
    return files;
  }
  MappedFile file(path, "text file", random_access);
  if (file.size() == 0) fail_usage("text file '{}' is empty; point the data path at a file with text", path);
  files.push_back(std::move(file));
  return files;
}

std::string text_what(const std::string& path) {
  std::error_code error;
  return (fs::is_directory(path, error) ? "text folder '" : "text file '") + path + "'";
}

}  // namespace

std::unique_ptr<TokenSource> open_synthetic(const SourceParams& params) {
  return std::make_unique<SyntheticSource>(params);
}

std::unique_ptr<TokenSource> open_token_file(const std::string& path, int token_bytes, const SourceParams& params) {
  const std::string dtype = token_bytes == 2 ? "uint16" : "uint32";
  if (path.empty()) fail_usage("the tokens data source needs a path: point it at a .bin file of {} token ids", dtype);
  std::error_code error;
  if (fs::is_directory(path, error)) {
    fail_usage("token file '{}' is a folder; point the data path at one .bin file of {} token ids", path, dtype);
  }
  MappedFile file(path, "token file");
  if (file.size() == 0) {
    fail_usage(
        "token file '{}' is empty; write the token ids into it (e.g. nanoGPT's prepare.py) or use the "
        "synthetic source",
        path);
  }
  if (file.size() % static_cast<size_t>(token_bytes) != 0) {
    fail_usage("token file '{}' is {} bytes, not a whole number of {} ids; check the token dtype", path, file.size(),
               dtype);
  }
  std::vector<MappedFile> files;
  files.push_back(std::move(file));
  return mapped_corpus(std::move(files), token_bytes, params, "token file '" + path + "'");
}

std::unique_ptr<TokenSource> open_text(const std::string& path, const SourceParams& params) {
  if (params.vocab < 256) {
    fail_usage(
        "text data uses byte values 0..255 as token ids, but vocab is {}; set the model's vocab to 256 or "
        "more",
        params.vocab);
  }
  return mapped_corpus(text_files(path, /*random_access=*/true), 1, params, text_what(path));
}

namespace {

// The tokenizer, refused when its ids do not fit the model's vocab.
std::unique_ptr<Tokenizer> fitting_tokenizer(const std::string& tokenizer, const SourceParams& params) {
  auto encoder = std::make_unique<Tokenizer>(tokenizer);
  if (encoder->vocab() > params.vocab)
    fail_usage(
        "tokenizer '{}' has {} pieces, but the model's vocab is {}; use the model's own tokenizer, or a model "
        "with a vocab of {} or more",
        tokenizer, encoder->vocab(), params.vocab, encoder->vocab());
  return encoder;
}

}  // namespace

void check_tokenized_text(const std::string& path, const std::string& tokenizer, const SourceParams& params) {
  fitting_tokenizer(tokenizer, params);
  text_files(path, /*random_access=*/false);
}

std::unique_ptr<TokenSource> open_tokenized_text(const std::string& path, const std::string& tokenizer,
                                                 const SourceParams& params) {
  const std::unique_ptr<Tokenizer> encoder = fitting_tokenizer(tokenizer, params);
  // Every file's ids, one after the other, each file a run of its own (an id out of range names the file).
  auto ids = std::make_shared<std::vector<uint32_t>>();
  std::vector<std::pair<size_t, std::string>> ends;  // (end index in ids, file)
  for (const MappedFile& file : text_files(path, /*random_access=*/false)) {
    encoder->encode(std::string_view(reinterpret_cast<const char*>(file.data()), file.size()), *ids);
    ends.emplace_back(ids->size(), file.path());
  }
  std::vector<TokenRun> runs;
  size_t begin = 0;
  for (const auto& [end, file] : ends) {
    if (end > begin)
      runs.push_back({reinterpret_cast<const unsigned char*>(ids->data() + begin), (end - begin) * 4, file});
    begin = end;
  }
  if (runs.empty()) fail_usage("tokenizer '{}' made no tokens of {}; check the text", tokenizer, text_what(path));
  return std::make_unique<CorpusSource>(std::move(runs), ids, 4, params,
                                        text_what(path) + " tokenized with '" + tokenizer + "'");
}

}  // namespace zhost::data
