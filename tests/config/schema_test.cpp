// tests/config/schema_test.cpp: declaring keys, agreement between owners, malformed declarations.
#include "config_test_support.hpp"

namespace zhost::config {
namespace {

using test_support::plugin_key;
using test_support::usage_error_of;

TEST(Schema, SameKeyFromTwoOwnersThatAgreeIsMerged) {
  Schema schema;
  schema.add(plugin_key("zero.reduce_bucket_size", ValueType::Int, "5e8", "stage1"));
  schema.add(plugin_key("zero.reduce_bucket_size", ValueType::Int, "500000000", "stage2"));
  EXPECT_EQ(schema.owners("zero.reduce_bucket_size"), (std::vector<std::string>{"stage1", "stage2"}));
  EXPECT_EQ(schema.default_value("zero.reduce_bucket_size"), ConfigValue(int64_t{500000000}));
  ASSERT_NE(schema.find("zero.reduce_bucket_size"), nullptr);
  EXPECT_EQ(schema.find("zero.reduce_bucket_size")->owner, "stage1");
  EXPECT_TRUE(schema.is_table("zero"));
  EXPECT_FALSE(schema.is_table("zero.reduce_bucket_size"));
}

TEST(Schema, ConflictingDefaultNamesBothOwners) {
  Schema schema;
  schema.add(plugin_key("zero.reduce_bucket_size", ValueType::Int, "5e8", "stage1"));
  std::string message =
      usage_error_of([&] { schema.add(plugin_key("zero.reduce_bucket_size", ValueType::Int, "100", "stage2")); });
  EXPECT_EQ(message,
            "config key zero.reduce_bucket_size is declared differently by plugin 'stage1' (int, default 500000000) "
            "and plugin 'stage2' (int, default 100); they cannot be loaded together until they agree");
}

TEST(Schema, ConflictingTypeNamesBothOwners) {
  Schema schema;
  add_host_keys(schema);
  std::string message =
      usage_error_of([&] { schema.add(plugin_key("zero.stage", ValueType::Float, "0.0", "stage9")); });
  EXPECT_EQ(message,
            "config key zero.stage is declared differently by the host (int, default 0) and plugin 'stage9' (float, "
            "default 0.0); they cannot be loaded together until they agree");
}

TEST(Schema, RequiredAndOptionalDisagree) {
  Schema schema;
  schema.add(plugin_key("zero.nvme_path", ValueType::String, std::nullopt, "offload_nvme"));
  KeySpec optional = plugin_key("zero.nvme_path", ValueType::String, std::nullopt, "other");
  optional.optional = true;
  std::string message = usage_error_of([&] { schema.add(optional); });
  EXPECT_TRUE(test_support::contains(message,
                                     "(string, no default (required)) and plugin 'other' (string, no "
                                     "default (optional))"))
      << message;
}

TEST(Schema, KeyWhereAnotherDeclaresATableIsRejected) {
  Schema schema;
  add_host_keys(schema);
  EXPECT_EQ(usage_error_of([&] { schema.add(plugin_key("zero", ValueType::Int, "1", "odd")); }),
            "plugin 'odd' declares config key zero, but the host declares zero.stage, which makes zero a "
            "table; rename one of them");
  EXPECT_EQ(usage_error_of([&] { schema.add(plugin_key("zero.stage.fast", ValueType::Bool, "true", "odd")); }),
            "plugin 'odd' declares config key zero.stage.fast, but the host declares zero.stage as a value, so it "
            "cannot be a table; rename one of them");
}

TEST(Schema, MalformedDeclarationsAreRejected) {
  Schema schema;
  EXPECT_EQ(usage_error_of([&] { schema.add(plugin_key("zero..x", ValueType::Int, "1", "p")); }),
            "plugin 'p' declares config key 'zero..x', which is not a dotted path of names like zero.stage");
  // What a plugin wrote is quoted on one line: control characters as \xNN (found by fuzz_descriptor).
  EXPECT_EQ(usage_error_of([&] { schema.add(plugin_key("steps\n.x", ValueType::Int, "1", "p")); }),
            "plugin 'p' declares config key 'steps\\x0a.x', which is not a dotted path of names like zero.stage");
  EXPECT_EQ(usage_error_of([&] { schema.add(plugin_key("p.device", ValueType::String, "c\npu", "p")); }),
            "plugin 'p' declares config key p.device with default `c\\x0apu`, which is not a TOML value; fix the "
            "declaration");
  EXPECT_EQ(usage_error_of([&] { schema.add(plugin_key("p.on", ValueType::Bool, "0", "p")); }),
            "plugin 'p' declares config key p.on with a default that does not fit its own declaration: p.on must be "
            "true or false, got integer 0; write e.g. on = true");  // not the default it refuses (fuzz_descriptor)
  EXPECT_EQ(usage_error_of([&] { schema.add(plugin_key("p.size", ValueType::Int, "1.5", "p")); }),
            "plugin 'p' declares config key p.size with a default that does not fit its own declaration: p.size must "
            "be an integer, got 1.5; write a whole number such as 1 or 2");
  EXPECT_EQ(usage_error_of([&] { schema.add(plugin_key("p.device", ValueType::String, "cpu", "p")); }),
            "plugin 'p' declares config key p.device with default `cpu`, which is not a TOML value; fix the "
            "declaration");
  KeySpec ranged = plugin_key("p.flag", ValueType::Bool, "true", "p");
  ranged.min = 0;
  EXPECT_EQ(usage_error_of([&] { schema.add(ranged); }),
            "plugin 'p' declares a range for config key p.flag, which is a bool; only numbers have ranges");
  KeySpec out_of_range = plugin_key("p.count", ValueType::Int, "0", "p");
  out_of_range.min = 1;
  EXPECT_EQ(usage_error_of([&] { schema.add(out_of_range); }),
            "plugin 'p' declares config key p.count with a default that does not fit its own declaration: p.count = "
            "0 is out of range; use a value of at least 1");
  EXPECT_EQ(schema.keys().size(), 0u);
}

TEST(Schema, KeysAreListedSorted) {
  Schema schema;
  schema.add(plugin_key("b.y", ValueType::Bool, "true", "p"));
  schema.add(plugin_key("a", ValueType::Bool, "true", "p"));
  schema.add(plugin_key("b.x", ValueType::Bool, "true", "p"));
  std::vector<std::string> paths;
  for (const KeySpec* spec : schema.keys()) paths.push_back(spec->path);
  EXPECT_EQ(paths, (std::vector<std::string>{"a", "b.x", "b.y"}));
  EXPECT_EQ(schema.tables(), (std::vector<std::string>{"b"}));
}

TEST(Schema, UndeclaredDefaultLookupIsABug) {
  Schema schema;
  EXPECT_THROW(schema.default_value("nope"), Error);
  EXPECT_EQ(schema.find("nope"), nullptr);
  EXPECT_TRUE(schema.owners("nope").empty());
}

}  // namespace
}  // namespace zhost::config
