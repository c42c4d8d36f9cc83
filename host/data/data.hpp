// host/data/data.hpp: training data for the built-in language models: each rank's micro-batches of token
// ids, deterministic from (seed, step, micro-step, rank).
//
// Sources (DataSpec::source):
//   synthetic  uniformly random token ids from a counter-based hash (the default; needs no file)
//   tokens     a raw binary file of uint16 or uint32 token ids with no header, as nanoGPT's prepare.py
//              (np.memmap) and Megatron's .bin files write them; memory-mapped
//   text       a file, or a folder whose regular files (not recursive) are concatenated in sorted name
//              order, read as bytes: token id = byte value, vocab 256; memory-mapped. With a tokenizer
//              (an HF tokenizer.json of byte-level BPE, or a SentencePiece model: tokenizer.hpp) each file is
//              tokenized once when the loader opens and the ids kept in memory instead
//
// The sample mapping (what the data-parallel and gradient-accumulation equivalence rests on):
// a step's global batch is a sequence of samples indexed 0, 1, 2, ... Sample i of step s is a function of
// (seed, s, i) alone: for synthetic, its seq_len+1 ids are hashes of (seed, s, i, position); for tokens and
// text, it is the window of seq_len+1 corpus tokens starting at hash(seed, s, i) mod (corpus tokens -
// seq_len). Rank r of a world of W ranks with micro-batch m takes, at micro-step k, the samples
//     k*W*m + r*m + j,   j = 0 .. m-1            (first_sample_index gives k*W*m + r*m)
// so 2 ranks with micro-batch m see together exactly what 1 rank with micro-batch 2m sees, and 1 rank
// with 2 micro-steps of m sees exactly what 1 rank with 1 micro-step of 2m sees (and any mix of both).
// Each sample gives tokens = window[0:T] and targets = window[1:T+1] (the next token).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>

namespace zhost::data {

struct DataSpec {
  std::string source = "synthetic";  // synthetic | tokens | text
  std::string path;                  // tokens: the token file; text: a file or a folder
  std::string token_dtype = "auto";  // tokens: uint16 | uint32 | auto (uint16 when vocab <= 65536, else uint32)
  std::string tokenizer;             // text: tokenizer.json, tokenizer.model or their folder; "": bytes are ids
  int64_t vocab = 256;               // ids must be < vocab (text needs vocab >= 256)
  int64_t seq_len = 64;              // T
  int64_t micro_batch = 1;           // m: samples per rank per micro-step
  int64_t world_size = 1;            // W: data-parallel ranks
  int64_t rank = 0;                  // r: this rank, 0 .. W-1
  uint64_t seed = 0;
};

struct Batch {
  at::Tensor tokens;   // [m, T] int64, on the CPU
  at::Tensor targets;  // [m, T] int64: tokens shifted by one
};

class TokenSource;  // internal: one sample's seq_len+1 ids from (step, sample index)

class DataLoader {
 public:
  // Opens and checks the source; a bad spec, a missing, empty or too short file give a UsageError.
  explicit DataLoader(const DataSpec& spec);
  // What the constructor checks, as cheaply as can be (before a job starts): a tokenized text's tokenizer is
  // loaded and its vocab checked, and its files listed, but the text is not tokenized.
  static void check(const DataSpec& spec);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // This rank's micro-batch for (step, micro_step): samples first_sample_index(micro_step, rank, W, m) + j.
  // Token ids >= vocab in the file give a UsageError here.
  Batch next(int64_t step, int64_t micro_step) const;
  // Samples [first_index, first_index + count) of step `step`'s global batch: tokens, targets [count, T].
  Batch samples(int64_t step, int64_t first_index, int64_t count) const;
  // The global index of the first sample rank `rank` reads at `micro_step`: micro_step*W*m + rank*m.
  static int64_t first_sample_index(int64_t micro_step, int64_t rank, int64_t world_size, int64_t micro_batch);

  const DataSpec& spec() const { return spec_; }  // token_dtype resolved for the tokens source
  int64_t corpus_tokens() const;                  // tokens in the file(s); 0 for synthetic

 private:
  DataSpec spec_;
  std::unique_ptr<TokenSource> source_;
};

}  // namespace zhost::data
