// tests/data/data_test.cpp: the data sources (synthetic, uint16/uint32 token files, text files and
// folders): determinism, the rank / micro-batch / micro-step sample mapping, and the messages for bad
// input.
#include "host/data/data.hpp"

#include <ATen/TensorOperators.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/equal.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "host/core/error.hpp"
#include "tests/support/scratch_dir.hpp"

namespace zhost::data {
namespace {

// The raw bytes of `ids` stored as T (uint16_t or uint32_t), as numpy's tofile writes them.
template <typename T>
std::string token_bytes(const std::vector<int64_t>& ids) {
  std::string bytes(ids.size() * sizeof(T), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto id = static_cast<T>(ids[i]);
    std::memcpy(bytes.data() + i * sizeof(T), &id, sizeof(T));
  }
  return bytes;
}

std::vector<int64_t> ramp(int64_t count, int64_t first = 0) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < count; ++i) ids.push_back(first + i);
  return ids;
}

std::vector<int64_t> row(const at::Tensor& tensor, int64_t r) {
  const at::Tensor line = tensor[r].contiguous();
  return std::vector<int64_t>(line.data_ptr<int64_t>(), line.data_ptr<int64_t>() + line.numel());
}

void expect_same_batch(const Batch& a, const Batch& b) {
  EXPECT_TRUE(at::equal(a.tokens, b.tokens));
  EXPECT_TRUE(at::equal(a.targets, b.targets));
}

Batch concat(const std::vector<Batch>& batches) {
  std::vector<at::Tensor> tokens, targets;
  for (const Batch& batch : batches) {
    tokens.push_back(batch.tokens);
    targets.push_back(batch.targets);
  }
  return {at::cat(tokens), at::cat(targets)};
}

// A fixture with one file of each source, so the mapping tests run over all three.
class EverySource : public ::testing::TestWithParam<std::string> {
 protected:
  DataSpec spec(int64_t world_size, int64_t rank, int64_t micro_batch) const {
    DataSpec s;
    s.source = GetParam();
    s.vocab = 300;
    s.seq_len = 8;
    s.seed = 42;
    s.world_size = world_size;
    s.rank = rank;
    s.micro_batch = micro_batch;
    if (s.source == "tokens") s.path = folder_.write("corpus.bin", token_bytes<uint16_t>(ramp(280)));
    if (s.source == "text") {
      s.path = (folder_.path() / "text").string();
      folder_.write("text/b.txt", "the second file, read after a.txt");
      folder_.write("text/a.txt", "the first file of the text folder");
    }
    return s;
  }
  zhost::testing::ScratchDir folder_;
};
INSTANTIATE_TEST_SUITE_P(Sources, EverySource, ::testing::Values("synthetic", "tokens", "text"));

TEST_P(EverySource, SameInputsGiveTheSameBatchAndTargetsAreShiftedTokens) {
  const DataLoader first(spec(1, 0, 4)), second(spec(1, 0, 4));
  const Batch batch = first.next(3, 1);
  expect_same_batch(batch, second.next(3, 1));
  EXPECT_EQ(batch.tokens.sizes(), (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(batch.tokens.scalar_type(), at::kLong);
  EXPECT_TRUE(at::equal(batch.tokens.narrow(1, 1, 7), batch.targets.narrow(1, 0, 7)));
  EXPECT_LT(batch.tokens.max().item<int64_t>(), 300);
  EXPECT_GE(batch.tokens.min().item<int64_t>(), 0);
  EXPECT_FALSE(at::equal(batch.tokens, first.next(4, 1).tokens)) << "another step gives other samples";
  EXPECT_FALSE(at::equal(batch.tokens, first.next(3, 0).tokens)) << "another micro-step gives other samples";
  DataSpec other_seed = spec(1, 0, 4);
  other_seed.seed += 1;
  EXPECT_FALSE(at::equal(batch.tokens, DataLoader(other_seed).next(3, 1).tokens));
}

TEST_P(EverySource, TwoRanksWithMicroBatchMSeeWhatOneRankWithTwoMSees) {
  const DataLoader rank0(spec(2, 0, 3)), rank1(spec(2, 0 + 1, 3)), single(spec(1, 0, 6));
  for (int64_t micro_step = 0; micro_step < 2; ++micro_step) {
    const Batch from_ranks = concat({rank0.next(5, micro_step), rank1.next(5, micro_step)});
    expect_same_batch(from_ranks, single.next(5, micro_step));
  }
  EXPECT_FALSE(at::equal(rank0.next(5, 0).tokens, rank1.next(5, 0).tokens)) << "ranks read distinct samples";
}

TEST_P(EverySource, GradientAccumulationMicroStepsSeeWhatOneLargerMicroBatchSees) {
  // 1 rank, 2 micro-steps of m = one micro-step of 2m
  const DataLoader accumulating(spec(1, 0, 2)), whole(spec(1, 0, 4));
  expect_same_batch(concat({accumulating.next(7, 0), accumulating.next(7, 1)}), whole.next(7, 0));
  // 2 ranks x 2 micro-steps of 1 = 1 rank x 1 micro-step of 4, in the order micro-step, then rank
  const DataLoader rank0(spec(2, 0, 1)), rank1(spec(2, 1, 1));
  expect_same_batch(concat({rank0.next(7, 0), rank1.next(7, 0), rank0.next(7, 1), rank1.next(7, 1)}), whole.next(7, 0));
  EXPECT_EQ(DataLoader::first_sample_index(3, 1, 4, 2), (3 * 4 + 1) * 2);
}

TEST(Synthetic, NeedsNoFileAndCoversTheVocab) {
  DataSpec spec;
  spec.vocab = 5;
  spec.seq_len = 64;
  spec.micro_batch = 4;
  const DataLoader loader(spec);
  EXPECT_EQ(loader.corpus_tokens(), 0);
  const Batch batch = loader.next(0, 0);
  EXPECT_EQ(batch.tokens.min().item<int64_t>(), 0);
  EXPECT_EQ(batch.tokens.max().item<int64_t>(), 4);
}

// Each sample of a file holding 0, 1, 2, ... is a run of consecutive ids starting inside the file.
void expect_windows_of_a_ramp(const Batch& batch, int64_t first_id, int64_t count) {
  for (int64_t r = 0; r < batch.tokens.size(0); ++r) {
    const std::vector<int64_t> tokens = row(batch.tokens, r);
    for (size_t t = 0; t < tokens.size(); ++t) EXPECT_EQ(tokens[t], tokens[0] + static_cast<int64_t>(t));
    EXPECT_GE(tokens.front(), first_id);
    EXPECT_LT(row(batch.targets, r).back(), first_id + count);
  }
}

TEST(TokenFile, ReadsUint16) {
  const zhost::testing::ScratchDir folder;
  DataSpec spec;
  spec.source = "tokens";
  spec.path = folder.write("train.bin", token_bytes<uint16_t>(ramp(1000, 60000)));
  spec.vocab = 65536;  // auto: uint16
  spec.seq_len = 16;
  spec.micro_batch = 8;
  const DataLoader loader(spec);
  EXPECT_EQ(loader.spec().token_dtype, "uint16");
  EXPECT_EQ(loader.corpus_tokens(), 1000);
  expect_windows_of_a_ramp(loader.next(0, 0), 60000, 1000);
}

TEST(TokenFile, ReadsUint32) {
  const zhost::testing::ScratchDir folder;
  DataSpec spec;
  spec.source = "tokens";
  spec.path = folder.write("train.bin", token_bytes<uint32_t>(ramp(1000, 100000)));
  spec.vocab = 200000;  // auto: uint32
  spec.seq_len = 16;
  spec.micro_batch = 8;
  const DataLoader loader(spec);
  EXPECT_EQ(loader.spec().token_dtype, "uint32");
  expect_windows_of_a_ramp(loader.next(2, 3), 100000, 1000);
  spec.token_dtype = "uint32";
  spec.vocab = 101000;  // explicit dtype, vocab just above the largest id
  expect_windows_of_a_ramp(DataLoader(spec).next(2, 3), 100000, 1000);
}

TEST(TokenFile, ExactlySeqLenPlusOneTokensIsEnough) {
  const zhost::testing::ScratchDir folder;
  DataSpec spec;
  spec.source = "tokens";
  spec.path = folder.write("tiny.bin", token_bytes<uint16_t>(ramp(9)));
  spec.seq_len = 8;
  const Batch batch = DataLoader(spec).next(0, 0);
  EXPECT_EQ(row(batch.tokens, 0), ramp(8));
  EXPECT_EQ(row(batch.targets, 0), ramp(8, 1));
}

TEST(TextSource, AFolderIsItsFilesInSortedOrderConcatenated) {
  const zhost::testing::ScratchDir folder;
  const std::string first = "0123456789", second = "abcdefghij", third = "KLMNOPQRST";
  folder.write("corpus/2.txt", third);
  folder.write("corpus/0.txt", first);
  folder.write("corpus/1.txt", second);
  folder.write("corpus/empty.txt", "");
  std::filesystem::create_directories(folder.path() / "corpus" / "subfolder");
  const std::string corpus = first + second + third;
  DataSpec spec;
  spec.source = "text";
  spec.path = (folder.path() / "corpus").string();
  spec.seq_len = 6;
  spec.micro_batch = 64;  // enough samples to cross both file boundaries
  const DataLoader loader(spec);
  EXPECT_EQ(loader.corpus_tokens(), static_cast<int64_t>(corpus.size()));
  const Batch batch = loader.next(0, 0);
  bool crossed_boundary = false;
  for (int64_t r = 0; r < batch.tokens.size(0); ++r) {
    std::vector<int64_t> window = row(batch.tokens, r);
    window.push_back(row(batch.targets, r).back());
    const std::string text(window.begin(), window.end());
    const size_t at = corpus.find(text);
    EXPECT_NE(at, std::string::npos) << text << " is not a window of the concatenated files";
    crossed_boundary |= at != std::string::npos && (at < 10 && at + text.size() > 10);
  }
  EXPECT_TRUE(crossed_boundary);
}

TEST(TextSource, ASingleFileIsReadAsBytes) {
  const zhost::testing::ScratchDir folder;
  DataSpec spec;
  spec.source = "text";
  spec.path = folder.write("tiny.txt", "hello\xff");
  spec.seq_len = 5;
  const Batch batch = DataLoader(spec).next(0, 0);
  EXPECT_EQ(row(batch.tokens, 0), (std::vector<int64_t>{'h', 'e', 'l', 'l', 'o'}));
  EXPECT_EQ(row(batch.targets, 0).back(), 255);
}

// Constructing a loader from `spec` (and reading one batch) must fail with a one-line UsageError whose
// message contains each of `fragments`.
void expect_usage_error(const DataSpec& spec, const std::vector<std::string>& fragments) {
  try {
    DataLoader(spec).next(0, 0);
    ADD_FAILURE() << "expected a UsageError";
  } catch (const UsageError& error) {
    const std::string message = error.what();
    for (const std::string& fragment : fragments) EXPECT_NE(message.find(fragment), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
}

TEST(DataErrors, BadFilesSayWhatToDo) {
  const zhost::testing::ScratchDir folder;
  DataSpec spec;
  spec.source = "tokens";
  spec.seq_len = 8;
  spec.vocab = 1000;

  spec.path = (folder.path() / "missing.bin").string();
  expect_usage_error(spec, {"missing.bin' does not exist", "check the data path"});
  spec.path = folder.write("empty.bin", "");
  expect_usage_error(spec, {"empty.bin' is empty", "synthetic"});
  spec.path = folder.write("short.bin", token_bytes<uint16_t>(ramp(8)));
  expect_usage_error(spec, {"holds 8 tokens", "seq_len + 1 = 9", "shorter seq_len"});
  spec.path = folder.write("odd.bin", "abc");
  expect_usage_error(spec, {"3 bytes, not a whole number of uint16 ids"});
  spec.path = folder.write("big_ids.bin", token_bytes<uint16_t>(std::vector<int64_t>(20, 4321)));
  expect_usage_error(spec, {"token id 4321", "vocab is 1000", "uint16 vs uint32"});
  spec.path = folder.path().string();
  expect_usage_error(spec, {"is a folder"});
  spec.path = "";
  expect_usage_error(spec, {"needs a path"});
}

// A FIFO as the data path is refused at once; opening it plainly would wait for a writer. A writer opens it
// after 3 s, so that the test ends either way.
TEST(DataErrors, AFifoIsRefusedWithoutWaiting) {
  const zhost::testing::ScratchDir folder;
  const std::string fifo = (folder.path() / "data.fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::seconds(3));
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);  // fails when nobody reads: then no one waits
    if (fd >= 0) ::close(fd);
  });
  for (const char* source : {"tokens", "text"}) {
    DataSpec spec;
    spec.source = source;
    spec.seq_len = 8;
    spec.vocab = 1000;
    spec.path = fifo;
    const auto started = std::chrono::steady_clock::now();
    expect_usage_error(spec, {"data.fifo' is not a regular file", "point the data path at a regular file"});
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(2)) << source;
  }
  writer.join();
}

TEST(DataErrors, BadSpecsSayWhatToDo) {
  const zhost::testing::ScratchDir folder;
  DataSpec spec;
  spec.source = "token";
  expect_usage_error(spec, {"did you mean 'tokens'"});
  spec = DataSpec();
  spec.world_size = 2;
  spec.rank = 2;
  expect_usage_error(spec, {"rank 2"});
  spec = DataSpec();
  spec.micro_batch = 0;
  expect_usage_error(spec, {"micro_batch must be at least 1"});
  spec = DataSpec();
  spec.source = "text";
  spec.vocab = 100;
  spec.path = folder.write("t.txt", "some text here");
  expect_usage_error(spec, {"vocab is 100", "256"});
  spec.vocab = 256;
  std::filesystem::create_directories(folder.path() / "nothing");
  spec.path = (folder.path() / "nothing").string();
  expect_usage_error(spec, {"no non-empty regular files"});
  spec = DataSpec();
  spec.source = "tokens";
  spec.vocab = 70000;
  spec.token_dtype = "uint16";
  expect_usage_error(spec, {"does not fit uint16"});
}

}  // namespace
}  // namespace zhost::data
