// tests/config/resolved_test.cpp: typed getters, origins, and the to_toml printout (and its round trip).
#include "config_test_support.hpp"

namespace zhost::config {
namespace {

using test_support::resolve;

// Runs `read` and returns the message of the zhost::Error it throws; a UsageError fails the test.
template <typename Read>
std::string bug_error_of(Read read) {
  try {
    read();
  } catch (const UsageError& error) {
    ADD_FAILURE() << "a programming error was reported as a usage error: " << error.what();
  } catch (const Error& error) {
    EXPECT_EQ(error.exit_code(), 1);
    return error.what();
  }
  ADD_FAILURE() << "expected an Error";
  return {};
}

TEST(ResolvedConfig, DefaultsAreAppliedAndMarkedAsDefaults) {
  ResolvedConfig config = resolve("[zero]\nstage = 2\n");
  EXPECT_EQ(config.get_int("steps"), 100);
  EXPECT_EQ(config.get_int("zero.reduce_bucket_size"), 500000000);
  EXPECT_EQ(config.get_string("model.type"), "gpt");
  EXPECT_EQ(config.get_float_list("optimizer.betas"), (std::vector<double>{0.9, 0.999}));
  EXPECT_TRUE(config.get_string_list("plugins.path").empty());
  EXPECT_FALSE(config.has("steps"));
  EXPECT_EQ(config.origin("steps"), "default");
  EXPECT_EQ(config.location("steps"), "train.toml:");
  EXPECT_TRUE(config.has("zero.stage"));
  EXPECT_EQ(config.origin("zero.stage"), "train.toml:2");
  EXPECT_EQ(config.location("zero.stage"), "train.toml:2:");
  EXPECT_EQ(config.owners("zero.reduce_bucket_size"), (std::vector<std::string>{"stage1", "stage2"}));
}

TEST(ResolvedConfig, OptionalKeysWithoutDefaultHaveNoValue) {
  ResolvedConfig config = resolve("train_micro_batch_size_per_gpu = 8\n");
  EXPECT_EQ(config.get_optional_int("train_micro_batch_size_per_gpu"), 8);
  EXPECT_EQ(config.get_optional_int("train_batch_size"), std::nullopt);
  EXPECT_FALSE(config.has("train_batch_size"));
  EXPECT_FALSE(config.get("train_batch_size").has_value());
  EXPECT_EQ(bug_error_of([&] { config.get_int("train_batch_size"); }),
            "config key 'train_batch_size' is optional and not set; a zhost bug read it without checking");
}

TEST(ResolvedConfig, MisusedGettersAreBugs) {
  ResolvedConfig config = resolve("");
  EXPECT_EQ(bug_error_of([&] { config.get_int("zero.stgae"); }),
            "config key 'zero.stgae' is not declared; a zhost bug asked for it");
  EXPECT_EQ(bug_error_of([&] { config.get_int("fp16.enabled"); }),
            "config key 'fp16.enabled' is of type bool, not int; a zhost bug read it with the wrong getter");
  EXPECT_EQ(bug_error_of([&] { config.get_float("zero.stage"); }),
            "config key 'zero.stage' is of type int, not float; a zhost bug read it with the wrong getter");
}

TEST(ResolvedConfig, GenericGetHoldsTheTypedValue) {
  ResolvedConfig config = resolve("seed = 7\n");
  EXPECT_EQ(config.get("seed"), ConfigValue(int64_t{7}));
  EXPECT_EQ(config.get("model.type"), ConfigValue(std::string("gpt")));
}

TEST(ResolvedConfig, ToTomlListsEveryKeyWithOriginAndOwnerInSortedOrder) {
  ResolvedConfig config = resolve("seed = 7\n[zero]\nstage = 2\n", {"zero.offload_optimizer.device=cpu"});
  std::string toml = config.to_toml();
  // Root keys first, then tables in sorted order, keys sorted within each.
  EXPECT_EQ(toml.rfind("# gradient_accumulation_steps is not set (int, optional)  # default (host)\n"
                       "gradient_clipping = 0.0  # default (host)\n"
                       "gradient_predivide_factor = 1.0  # default (host)\n"
                       "memory_breakdown = false  # default (host)\n"
                       "prescale_gradients = false  # default (host)\n"
                       "seed = 7  # train.toml:1 (host)\n",
                       0),
            0u)
      << toml;
  EXPECT_TRUE(test_support::contains(toml, "seed = 7  # train.toml:1 (host)\n")) << toml;
  EXPECT_TRUE(test_support::contains(toml,
                                     "\n[zero]\n"
                                     "overlap_comm = false  # default (stage2)\n"
                                     "reduce_bucket_size = 500000000  # default (stage1, stage2)\n"
                                     "stage = 2  # train.toml:3 (host)\n"
                                     "zero_hpz_partition_size = 1  # default (host)\n"
                                     "zero_quantized_gradients = false  # default (host)\n"
                                     "zero_quantized_weights = false  # default (host)\n"
                                     "\n[zero.offload_optimizer]\n"
                                     "buffer_count = 4  # default (host)\n"
                                     "delayed_update = false  # default (host)\n"
                                     "delayed_update_start_step = 41  # default (host)\n"
                                     "device = \"cpu\"  # --set (host)\n"
                                     "fast_init = false  # default (host)\n"
                                     "pipeline_read = false  # default (host)\n"
                                     "pipeline_write = false  # default (host)\n"
                                     "storage = \"none\"  # default (host)\n"
                                     "swap_schedule = []  # default (host)\n"
                                     "\n[zero.offload_param]\n"
                                     "device = \"none\"  # default (host)\n"))
      << toml;
  EXPECT_TRUE(test_support::contains(
      toml, "\n[optimizer]\nadam_w_mode = true  # default (host)\nbetas = [0.9, 0.999]  # default (host)\n"))
      << toml;
  // Research and test switches sit in their own tables, not among the settings a user tunes.
  EXPECT_TRUE(test_support::contains(toml,
                                     "\n[experimental]\n"
                                     "checkpoint_async = false  # default (host)\n"
                                     "delayed_update_extrapolation = 0.0  # default (host)\n"
                                     "delayed_update_lookahead = 0.0  # default (host)\n"))
      << toml;
  EXPECT_EQ(toml.find('['), toml.find("[activation_checkpointing]")) << toml;
  EXPECT_EQ(resolve("seed = 7\n[zero]\nstage = 2\n", {"zero.offload_optimizer.device=cpu"}).to_toml(), toml);
}

TEST(ResolvedConfig, ToTomlRoundTrips) {
  ResolvedConfig original = resolve(
      "seed = 7\ntrain_batch_size = 64\n[run]\nname = \"quote \\\" backslash \\\\ tab\\t\"\n"
      "[optimizer]\nlr = 3e-4\nbetas = [0.9, 0.95]\neps = 1e-12\n[comm]\ntimeout_s = 6.048e5\n",
      {"plugins.path=[\"/opt/zhost\", \"./plugins\"]", "zero.reduce_bucket_size=5e8", "scheduler.type=OneCycle",
       "scheduler.cycle_min_lr=1e-5", "scheduler.cycle_max_lr=3e-4"});
  std::string printed = original.to_toml();
  ResolvedConfig reparsed = validate(Document::parse(printed, "printed.toml"), test_support::host_and_stage_schema());
  ASSERT_EQ(reparsed.keys(), original.keys());
  for (const std::string& path : original.keys()) {
    EXPECT_EQ(reparsed.get(path), original.get(path)) << path << " in\n" << printed;
  }
  EXPECT_EQ(reparsed.get_string("run.name"), "quote \" backslash \\ tab\t");
  EXPECT_EQ(reparsed.get_string_list("plugins.path"), (std::vector<std::string>{"/opt/zhost", "./plugins"}));
}

}  // namespace
}  // namespace zhost::config
