// host/data/sentencepiece_tokenizer.cpp: SentencePiece models through libzhost_sentencepiece.so
// (sentencepiece_shim.cpp), loaded in a scope of its own: Note [SentencePiece in its own scope].
#include "host/data/sentencepiece_tokenizer.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <filesystem>

#include "host/core/error.hpp"

namespace zhost::data {
namespace {

// The shim's C API (sentencepiece_shim.cpp).
struct ShimApi {
  void* (*load)(const char* path, char* error, size_t capacity) = nullptr;
  int64_t (*vocab)(void* model) = nullptr;
  int (*encode)(void* model, const char* text, size_t len, void (*append)(void*, const int32_t*, size_t), void* user,
                char* error, size_t capacity) = nullptr;
  void (*free)(void* model) = nullptr;
};

// Where the shim is: next to the executable's lib/zhost (build tree and install alike), else where this build
// put it (a test binary elsewhere in the build tree).
std::vector<std::string> shim_candidates() {
  std::vector<std::string> candidates;
  std::error_code error;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) candidates.push_back((exe.parent_path().parent_path() / "lib/zhost/libzhost_sentencepiece.so").string());
#ifdef ZHOST_SENTENCEPIECE_SHIM
  candidates.push_back(ZHOST_SENTENCEPIECE_SHIM);
#endif
  return candidates;
}

// Loaded once for the process, never unloaded (like plugins: docs/abi.md §2).
const ShimApi& shim() {
  static const ShimApi api = [] {
    ShimApi loaded;
    std::string tried;
    for (const std::string& path : shim_candidates()) {
      void* library = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (!library) {
        tried += (tried.empty() ? "" : "; ") + std::string(::dlerror());
        continue;
      }
      loaded.load = reinterpret_cast<decltype(loaded.load)>(::dlsym(library, "zhost_spm_load"));
      loaded.vocab = reinterpret_cast<decltype(loaded.vocab)>(::dlsym(library, "zhost_spm_vocab"));
      loaded.encode = reinterpret_cast<decltype(loaded.encode)>(::dlsym(library, "zhost_spm_encode"));
      loaded.free = reinterpret_cast<decltype(loaded.free)>(::dlsym(library, "zhost_spm_free"));
      if (loaded.load && loaded.vocab && loaded.encode && loaded.free) return loaded;
      tried += (tried.empty() ? "" : "; ") + path + " lacks zhost_spm_* functions";
    }
    fail_usage(
        "a SentencePiece data.tokenizer needs libzhost_sentencepiece.so, which this zhost was built without or "
        "cannot load ({}); "
        "install libsentencepiece-dev (scripts/setup-deps does) and rebuild, or tokenize beforehand and use "
        "data.type = \"tokens\"",
        tried.empty() ? "not built" : tried);
  }();
  return api;
}

class SentencePiece final : public TokenizerModel {
 public:
  explicit SentencePiece(const std::string& path) : path_(path) {
    char error[512] = {};
    model_ = shim().load(path.c_str(), error, sizeof(error));
    if (!model_)
      fail_usage("data.tokenizer '{}' is not a SentencePiece model ({}); point it at the model's tokenizer.model", path,
                 error);
  }
  ~SentencePiece() override { shim().free(model_); }
  SentencePiece(const SentencePiece&) = delete;
  SentencePiece& operator=(const SentencePiece&) = delete;

  int64_t vocab() const override { return shim().vocab(model_); }

  // Line by line: SentencePiece normalises a newline to a space, so lines are its sentences.
  void encode(std::string_view text, std::vector<uint32_t>& ids) const override {
    auto append = [](void* user, const int32_t* piece_ids, size_t count) {
      auto& out = *static_cast<std::vector<uint32_t>*>(user);
      out.insert(out.end(), piece_ids, piece_ids + count);
    };
    char error[512] = {};
    while (!text.empty()) {
      const size_t end = std::min(text.find('\n'), text.size());
      if (shim().encode(model_, text.data(), end, append, &ids, error, sizeof(error)) != 0)
        fail("data.tokenizer '{}' could not encode the text: {}", path_, error);
      text.remove_prefix(std::min(end + 1, text.size()));
    }
  }

 private:
  std::string path_;
  void* model_ = nullptr;
};

}  // namespace

std::unique_ptr<TokenizerModel> open_sentencepiece(const std::string& path) {
  return std::make_unique<SentencePiece>(path);
}

}  // namespace zhost::data
