// host/data/sentencepiece_shim.cpp: libsentencepiece behind a C API, built as its own shared object
// (libzhost_sentencepiece.so) that tokenizer.cpp loads with RTLD_LOCAL | RTLD_DEEPBIND.
//
// Note [SentencePiece in its own scope]: Debian's libsentencepiece carries its own copy of protobuf and exports
// its symbols; LibTorch's process already has libprotobuf.so.32 (through onnx). Linked into zhost, the two
// copies bind to each other's symbols and zhost crashes before main. Loaded on its own, with its symbols looked
// up in its own scope first, libsentencepiece keeps its protobuf and the process keeps LibTorch's.
#include <sentencepiece_processor.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace {

void copy_error(const std::string& message, char* error, size_t capacity) {
  if (!error || capacity == 0) return;
  std::strncpy(error, message.c_str(), capacity - 1);
  error[capacity - 1] = '\0';
}

}  // namespace

extern "C" {

// A model, or nullptr with the reason in `error`.
__attribute__((visibility("default"))) void* zhost_spm_load(const char* path, char* error, size_t capacity) {
  auto* processor = new sentencepiece::SentencePieceProcessor();
  const sentencepiece::util::Status status = processor->Load(path);
  if (status.ok()) return processor;
  copy_error(status.ToString(), error, capacity);
  delete processor;
  return nullptr;
}

__attribute__((visibility("default"))) int64_t zhost_spm_vocab(void* model) {
  return static_cast<sentencepiece::SentencePieceProcessor*>(model)->GetPieceSize();
}

// Appends the ids of text[0, len) to *ids (grown with realloc-free copies through `append`): returns 0, or -1 with
// the reason in `error`.
__attribute__((visibility("default"))) int zhost_spm_encode(void* model, const char* text, size_t len,
                                                            void (*append)(void* user, const int32_t* ids,
                                                                           size_t count),
                                                            void* user, char* error, size_t capacity) {
  std::vector<int> pieces;
  const sentencepiece::util::Status status =
      static_cast<sentencepiece::SentencePieceProcessor*>(model)->Encode(absl::string_view(text, len), &pieces);
  if (!status.ok()) {
    copy_error(status.ToString(), error, capacity);
    return -1;
  }
  static_assert(sizeof(int) == sizeof(int32_t), "ids are int");
  append(user, reinterpret_cast<const int32_t*>(pieces.data()), pieces.size());
  return 0;
}

__attribute__((visibility("default"))) void zhost_spm_free(void* model) {
  delete static_cast<sentencepiece::SentencePieceProcessor*>(model);
}

}  // extern "C"
