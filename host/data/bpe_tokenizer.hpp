// host/data/bpe_tokenizer.hpp: byte-level BPE read from a Hugging Face tokenizer.json (GPT-2's, Llama 3's and the
// like), in C++ with nlohmann-json alone: Note [Byte-level BPE] (bpe_tokenizer.cpp).
#pragma once

#include <memory>
#include <string>

#include "host/data/tokenizer.hpp"

namespace zhost::data {

// The tokenizer in `path` (a tokenizer.json); a file zhost cannot read, or one that asks for what zhost does not
// do, is a one-line UsageError naming it.
std::unique_ptr<TokenizerModel> open_byte_level_bpe(const std::string& path);

}  // namespace zhost::data
