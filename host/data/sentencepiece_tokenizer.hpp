// host/data/sentencepiece_tokenizer.hpp: a SentencePiece model (Hugging Face's tokenizer.model for Llama and
// Mistral) through Debian's libsentencepiece, loaded at run time: Note [SentencePiece in its own scope]
// (sentencepiece_shim.cpp). A zhost built without it refuses such a model with what to install.
#pragma once

#include <memory>
#include <string>

#include "host/data/tokenizer.hpp"

namespace zhost::data {

// The model in `path`; a file that is no SentencePiece model is a UsageError naming it. Its encode() works line
// by line: SentencePiece normalises a newline to a space, so lines are its sentences and a newline is no token.
std::unique_ptr<TokenizerModel> open_sentencepiece(const std::string& path);

}  // namespace zhost::data
