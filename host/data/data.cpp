// host/data/data.cpp: DataLoader: checks the spec, opens the source, and assembles each rank's
// micro-batches as int64 tensors following the sample mapping documented in data.hpp.
#include "host/data/data.hpp"

#include <ATen/ops/empty.h>

#include <algorithm>
#include <vector>

#include "host/core/error.hpp"
#include "host/core/text.hpp"
#include "host/data/token_source.hpp"

namespace zhost::data {
namespace {

const std::vector<std::string> kSources = {"synthetic", "tokens", "text"};
const std::vector<std::string> kTokenDtypes = {"auto", "uint16", "uint32"};

void require_positive(const char* field, int64_t value) {
  if (value < 1) fail_usage("data {} must be at least 1 (got {})", field, value);
}

void require_one_of(const char* field, const std::string& value, const std::vector<std::string>& allowed) {
  if (std::find(allowed.begin(), allowed.end(), value) == allowed.end()) {
    fail_usage("data {} '{}' is unknown{}; use one of {}", field, value, text::did_you_mean(value, allowed),
               text::join(allowed));
  }
}

}  // namespace

DataLoader::DataLoader(const DataSpec& spec) : spec_(spec) {
  require_one_of("source", spec.source, kSources);
  require_one_of("token_dtype", spec.token_dtype, kTokenDtypes);
  require_positive("vocab", spec.vocab);
  require_positive("seq_len", spec.seq_len);
  require_positive("micro_batch", spec.micro_batch);
  require_positive("world_size", spec.world_size);
  if (spec.rank < 0 || spec.rank >= spec.world_size) {
    fail_usage("data rank {} is outside 0 .. world_size-1 = {}", spec.rank, spec.world_size - 1);
  }
  if (spec_.token_dtype == "auto") spec_.token_dtype = spec.vocab <= 65536 ? "uint16" : "uint32";
  if (spec.source == "tokens" && spec_.token_dtype == "uint16" && spec.vocab > 65536) {
    fail_usage("vocab {} does not fit uint16 token ids; use token_dtype uint32", spec.vocab);
  }
  const SourceParams params{spec.vocab, spec.seq_len, spec.seed};
  if (spec.source == "synthetic") {
    source_ = open_synthetic(params);
  } else if (spec.source == "tokens") {
    source_ = open_token_file(spec.path, spec_.token_dtype == "uint16" ? 2 : 4, params);
  } else if (spec.tokenizer.empty()) {
    source_ = open_text(spec.path, params);
  } else {
    source_ = open_tokenized_text(spec.path, spec.tokenizer, params);
  }
}

void DataLoader::check(const DataSpec& spec) {
  if (spec.source != "text" || spec.tokenizer.empty()) {
    DataLoader loader(spec);
    return;
  }
  require_positive("vocab", spec.vocab);
  require_positive("seq_len", spec.seq_len);
  check_tokenized_text(spec.path, spec.tokenizer, SourceParams{spec.vocab, spec.seq_len, spec.seed});
}

DataLoader::~DataLoader() = default;

int64_t DataLoader::first_sample_index(int64_t micro_step, int64_t rank, int64_t world_size, int64_t micro_batch) {
  return (micro_step * world_size + rank) * micro_batch;
}

Batch DataLoader::next(int64_t step, int64_t micro_step) const {
  if (step < 0 || micro_step < 0) fail("DataLoader::next: step {} and micro_step {} must be >= 0", step, micro_step);
  return samples(step, first_sample_index(micro_step, spec_.rank, spec_.world_size, spec_.micro_batch),
                 spec_.micro_batch);
}

Batch DataLoader::samples(int64_t step, int64_t first_index, int64_t count) const {
  const int64_t window = spec_.seq_len + 1;
  at::Tensor windows = at::empty({count, window}, at::TensorOptions().dtype(at::kLong));  // [count, T+1]
  int64_t* ids = windows.data_ptr<int64_t>();
  for (int64_t j = 0; j < count; ++j) source_->read_sample(step, first_index + j, ids + j * window);
  return {windows.narrow(1, 0, spec_.seq_len).contiguous(), windows.narrow(1, 1, spec_.seq_len).contiguous()};
}

int64_t DataLoader::corpus_tokens() const { return source_->corpus_tokens(); }

}  // namespace zhost::data
