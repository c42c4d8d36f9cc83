// tests/config/document_test.cpp: loading TOML files and applying --set overrides.
#include "host/config/document/document.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "config_test_support.hpp"

namespace zhost::config {
namespace {

using test_support::contains;
using test_support::resolve;
using test_support::usage_error_of;

TEST(Document, ParseErrorIsOneLineWithFileLineAndColumn) {
  std::string message = usage_error_of([] { Document::parse("[zero]\nstage = \n", "bad.toml"); });
  EXPECT_EQ(message, "bad.toml:2:9: Error while parsing key-value pair: expected value, saw '\\n'");
}

TEST(Document, DuplicateKeyIsAParseError) {
  std::string message = usage_error_of([] { Document::parse("a = 1\na = 2\n", "dup.toml"); });
  EXPECT_EQ(message, "dup.toml:2:5: Error while parsing key-value pair: cannot redefine existing integer 'a'");
}

TEST(Document, MissingFileIsOneLineUsageError) {
  std::string message = usage_error_of([] { Document::load_file("/nonexistent/zhost/train.toml"); });
  EXPECT_EQ(message,
            "/nonexistent/zhost/train.toml: cannot read the config file (No such file or directory); check "
            "the path");
}

TEST(Document, DirectoryIsNotAConfigFile) {
  std::string message = usage_error_of([] { Document::load_file("/tmp"); });
  EXPECT_EQ(message, "/tmp: is a directory, not a config file; name a .toml file");
}

TEST(Document, LoadsFileAndNamesItInOrigins) {
  auto path = std::filesystem::temp_directory_path() / "zhost_config_document_test.toml";
  std::ofstream(path) << "# comment\n[zero]\nstage = 2\n";
  Document document = Document::load_file(path.string());
  std::filesystem::remove(path);
  EXPECT_EQ(document.source_name(), path.string());
  EXPECT_TRUE(document.contains("zero.stage"));
  EXPECT_FALSE(document.contains("zero"));  // a table, not a value
  ResolvedConfig config = validate(document, test_support::host_and_stage_schema());
  EXPECT_EQ(config.get_int("zero.stage"), 2);
  EXPECT_EQ(config.origin("zero.stage"), path.string() + ":3");
}

TEST(Document, OverridesParseTomlValues) {
  ResolvedConfig config = resolve("", {"fp16.enabled=true", "zero.stage=3", "zero.reduce_bucket_size=5e8",
                                       "run.name=\"my run\"", "optimizer.betas=[0.9,0.95]", "optimizer.lr=1e-4"});
  EXPECT_TRUE(config.get_bool("fp16.enabled"));
  EXPECT_EQ(config.get_int("zero.stage"), 3);
  EXPECT_EQ(config.get_int("zero.reduce_bucket_size"), 500000000);
  EXPECT_EQ(config.get_string("run.name"), "my run");
  EXPECT_EQ(config.get_float_list("optimizer.betas"), (std::vector<double>{0.9, 0.95}));
  EXPECT_DOUBLE_EQ(config.get_float("optimizer.lr"), 1e-4);
}

TEST(Document, OverrideValueThatIsNotTomlIsABareString) {
  ResolvedConfig config = resolve("", {"zero.stage=2", "zero.offload_optimizer.device=cpu", "run.dir=/tmp/runs a"});
  EXPECT_EQ(config.get_string("zero.offload_optimizer.device"), "cpu");
  EXPECT_EQ(config.get_string("run.dir"), "/tmp/runs a");
}

TEST(Document, OverrideOfAStringKeyKeepsTheTextAsWritten) {
  ResolvedConfig config = resolve("", {"run.name=2024", "run.dir=true"});
  EXPECT_EQ(config.get_string("run.name"), "2024");
  EXPECT_EQ(config.get_string("run.dir"), "true");
}

TEST(Document, OverrideCreatesMissingTablesAndReplacesFileValues) {
  Document document = Document::parse("[zero]\nstage = 1\n", "train.toml");
  document.apply_override("zero.offload_optimizer.device=cpu");
  document.apply_override("zero.stage=2");
  EXPECT_TRUE(document.contains("zero.offload_optimizer.device"));
  ResolvedConfig config = validate(document, test_support::host_and_stage_schema());
  EXPECT_EQ(config.get_string("zero.offload_optimizer.device"), "cpu");
  EXPECT_EQ(config.get_int("zero.stage"), 2);
  EXPECT_EQ(config.origin("zero.stage"), "--set");
  EXPECT_EQ(config.location("zero.stage"), "--set zero.stage=2:");
}

TEST(Document, LastOverrideOfAKeyWins) {
  ResolvedConfig config = resolve("", {"zero.stage=1", "zero.stage=3"});
  EXPECT_EQ(config.get_int("zero.stage"), 3);
  EXPECT_EQ(config.location("zero.stage"), "--set zero.stage=3:");
}

TEST(Document, MalformedOverridesAreRejected) {
  Document document = Document::parse("[zero]\nstage = 1\n", "train.toml");
  EXPECT_EQ(usage_error_of([&] { document.apply_override("zero.stage"); }),
            "--set zero.stage: expected KEY=VALUE, e.g. --set zero.stage=2");
  EXPECT_EQ(usage_error_of([&] { document.apply_override("zero..stage=2"); }),
            "--set zero..stage=2: 'zero..stage' is not a dotted key path; write names of letters, digits, _ and - "
            "joined by dots, e.g. zero.offload_optimizer.device");
  EXPECT_EQ(usage_error_of([&] { document.apply_override("zero.stage.x=2"); }),
            "--set zero.stage.x=2: zero.stage is already a value (set at train.toml:2), not a table, so it cannot "
            "hold zero.stage.x");
  EXPECT_EQ(usage_error_of([&] { document.apply_override("zero=2"); }),
            "--set zero=2: zero is a table; set one of its keys instead, e.g. --set zero.KEY=VALUE");
  EXPECT_EQ(usage_error_of([&] { document.apply_override("zero.offload_param={device=\"cpu\"}"); }),
            "--set zero.offload_param={device=\"cpu\"}: the value is a table; set its keys one at a time, e.g. --set "
            "zero.offload_param.KEY=VALUE");
}

TEST(Document, PeekReadsValuesBeforeValidation) {
  Document document = Document::parse(
      "[plugins]\npath = [\"/opt/zhost\"]\n[zero]\nstage = 2\nbucket = 5e8\nlist = [1, 2.5]\nempty = []\n"
      "mixed = [1, \"a\"]\n",
      "train.toml");
  document.apply_override("zero.offload_optimizer.device=cpu");
  EXPECT_EQ(document.peek("plugins.path"), ConfigValue(std::vector<std::string>{"/opt/zhost"}));
  EXPECT_EQ(document.peek("zero.stage"), ConfigValue(int64_t{2}));
  EXPECT_EQ(document.peek("zero.bucket"), ConfigValue(5e8));
  EXPECT_EQ(document.peek("zero.list"), ConfigValue(std::vector<double>{1.0, 2.5}));
  EXPECT_EQ(document.peek("zero.empty"), ConfigValue(std::vector<std::string>{}));
  EXPECT_EQ(document.peek("zero.offload_optimizer.device"), ConfigValue(std::string("cpu")));
  EXPECT_EQ(document.peek("zero.mixed"), std::nullopt);
  EXPECT_EQ(document.peek("zero"), std::nullopt);
  EXPECT_EQ(document.peek("zero.missing"), std::nullopt);
}

TEST(Document, EmptyDocumentGivesDefaults) {
  ResolvedConfig config = validate(Document(), test_support::host_and_stage_schema());
  EXPECT_EQ(config.get_int("zero.stage"), 0);
  EXPECT_EQ(config.location("zero.stage"), "config:");
}

}  // namespace
}  // namespace zhost::config
