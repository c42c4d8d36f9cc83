// tests/data/tokenizer_test.cpp: data.type = "text" through a SentencePiece tokenizer (host/data/tokenizer.hpp):
// a BPE model trained here with Debian's spm_train on its license texts (no model ships in Debian), then
// - every sample the loader gives is a window of the files' ids, encoded line by line in sorted file order
//   (the expected ids come from Debian's spm_encode, not from zhost's code);
// - a model file that is missing or not a model, and a vocab smaller than the tokenizer's, are clear errors;
// - a llama with the tokenizer's vocab trains on the text with `zhost run` and its loss falls.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "host/core/error.hpp"
#include "host/data/data.hpp"
#include "tests/support/scratch_dir.hpp"
#include "tests/training/training_test_support.hpp"

namespace fs = std::filesystem;
using zhost::data::DataLoader;
using zhost::data::DataSpec;
using zhost::testing::ScratchDir;

namespace {

constexpr int kVocab = 300;

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// DIR/text/{a,b}.txt (two licenses) and DIR/spm.model trained on them with spm_train.
struct Corpus {
  explicit Corpus(const ScratchDir& dir) : text(dir.path() / "text"), model((dir.path() / "spm.model").string()) {
    fs::create_directories(text);
    fs::copy_file("/usr/share/common-licenses/GPL-3", text / "b.txt");
    fs::copy_file("/usr/share/common-licenses/Apache-2.0", text / "a.txt");
    const std::string train =
        "spm_train --input=" + (text / "a.txt").string() + "," + (text / "b.txt").string() +
        " --model_prefix=" + (dir.path() / "spm").string() + " --vocab_size=" + std::to_string(kVocab) +
        " --model_type=bpe --character_coverage=1.0 --minloglevel=2 > " + (dir.path() / "train.log").string() + " 2>&1";
    trained = std::system(train.c_str()) == 0 && fs::exists(model);
    if (!trained) error = read_file(dir.path() / "train.log");
  }
  fs::path text;
  std::string model;
  bool trained = false;
  std::string error;
};

// The ids spm_encode gives for `file`, one line of ids per line of text.
std::vector<int64_t> spm_encode(const std::string& model, const fs::path& file, const fs::path& out) {
  const std::string command =
      "spm_encode --model=" + model + " --output_format=id < " + file.string() + " > " + out.string();
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  std::vector<int64_t> ids;
  std::istringstream words(read_file(out));
  for (int64_t id; words >> id;) ids.push_back(id);
  return ids;
}

DataSpec spec_for(const Corpus& corpus, int64_t vocab) {
  DataSpec spec;
  spec.source = "text";
  spec.path = corpus.text.string();
  spec.tokenizer = corpus.model;
  spec.vocab = vocab;
  spec.seq_len = 32;
  spec.micro_batch = 4;
  spec.seed = 3;
  return spec;
}

TEST(Tokenizer, SamplesAreWindowsOfTheFilesIdsInSortedOrder) {
  ScratchDir dir;
  Corpus corpus(dir);
  ASSERT_TRUE(corpus.trained) << corpus.error;
  std::vector<int64_t> expected;  // a.txt, then b.txt, each line by line
  for (const char* name : {"a.txt", "b.txt"})
    for (int64_t id : spm_encode(corpus.model, corpus.text / name, dir.path() / "ids.txt")) expected.push_back(id);
  ASSERT_GT(expected.size(), 1000u);
  DataLoader loader(spec_for(corpus, kVocab));
  EXPECT_EQ(loader.corpus_tokens(), static_cast<int64_t>(expected.size()));
  for (int64_t step = 0; step < 5; ++step) {
    const zhost::data::Batch batch = loader.next(step, 0);
    ASSERT_EQ(batch.tokens.size(1), 32);
    for (int64_t j = 0; j < batch.tokens.size(0); ++j) {
      const int64_t* ids = batch.tokens[j].data_ptr<int64_t>();
      const auto at = std::search(expected.begin(), expected.end(), ids, ids + 32);
      ASSERT_NE(at, expected.end()) << "sample " << j << " of step " << step << " is no window of the corpus";
      EXPECT_EQ(batch.targets[j][31].item<int64_t>(), *(at + 32)) << "the target is the next token";
    }
  }
}

TEST(Tokenizer, BadModelOrSmallVocabIsAClearError) {
  ScratchDir dir;
  Corpus corpus(dir);
  ASSERT_TRUE(corpus.trained) << corpus.error;
  try {
    DataLoader loader(spec_for(corpus, 256));
    FAIL() << "a vocab below the tokenizer's was accepted";
  } catch (const zhost::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("has 300 pieces, but the model's vocab is 256"), std::string::npos)
        << e.what();
  }
  Corpus bad = corpus;
  bad.model = (corpus.text / "a.txt").string();  // a text file, not a model
  try {
    DataLoader loader(spec_for(bad, kVocab));
    FAIL() << "a text file was taken for a model";
  } catch (const zhost::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("is not a SentencePiece model"), std::string::npos) << e.what();
  }
  bad.model = (dir.path() / "missing.model").string();
  EXPECT_THROW(DataLoader loader(spec_for(bad, kVocab)), zhost::UsageError);
  try {
    DataLoader loader(spec_for(bad, kVocab));
  } catch (const zhost::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("missing.model' is not a file; point it at the model's tokenizer.json "
                                         "(byte-level BPE) or tokenizer.model (SentencePiece)"),
              std::string::npos)
        << e.what();
  }
}

TEST(Tokenizer, ALlamaTrainsOnTokenizedText) {
  ScratchDir dir;
  Corpus corpus(dir);
  ASSERT_TRUE(corpus.trained) << corpus.error;
  const zhost::testing::RunOutput run = zhost::testing::run_zhost(
      dir.path(), zhost::testing::small_job_config(), "spm",
      "--set model.type=llama --set model.vocab=" + std::to_string(kVocab) + " --set steps=60 --set data.path=" +
          corpus.text.string() + " --set data.tokenizer=" + corpus.model + " --set train_micro_batch_size_per_gpu=4");
  ASSERT_EQ(run.exit_code, 0) << run.err;
  ASSERT_EQ(run.losses.size(), 60u);
  // From about ln(300) = 5.7 at the start; measured once: 5.04 at step 60.
  EXPECT_GT(run.losses.front(), 5.4);
  EXPECT_LT(run.losses.back(), run.losses.front() - 0.4) << "the loss did not fall";
}

}  // namespace
