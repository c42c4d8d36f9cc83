// tests/cli/resolution_plugin.cpp: a partition plugin used only as a fixture for the CLI tests of plugin
// resolution and config validation. Built twice: as "tp_stage1" (provides partition:stage1) and as
// "tp_stage2" (partition:stage2, with an extra key), so that a config can select one and be checked
// against the other's keys. Its hooks refuse to run: it must never be mistaken for a real stage.
#include "zhost/cpp/plugin.hpp"

namespace {

struct Fixture {
  explicit Fixture(const zhost::sdk::Host& host) {
    // Reading every declared key proves the host hands the validated values to the plugin.
    host.info("bucket " + std::to_string(host.config_int("zero.reduce_bucket_size")));
  }
};
using Instance = zhost::sdk::InstanceOf<Fixture>;

zhost_status* refuse(zhost_plugin_instance*) {
  return zhost::sdk::guard([] { throw zhost::sdk::PluginError(ZHOST_ERR_UNSUPPORTED, "test fixture: no training"); });
}
zhost_status* refuse_block(zhost_plugin_instance* self, const zhost_block_args*) { return refuse(self); }

const zhost_partition_api kPartition = {
    sizeof(zhost_partition_api),
    nullptr,
    [](zhost_plugin_instance* self, const zhost_partition_setup*) { return refuse(self); },
    [](zhost_plugin_instance* self, const zhost_micro_batch_args*) { return refuse(self); },
    refuse_block,
    refuse_block,
    refuse_block,
    [](zhost_plugin_instance* self, const zhost_grad_ready_args*) { return refuse(self); },
    refuse_block,
    [](zhost_plugin_instance* self, const zhost_backward_end_args*) { return refuse(self); },
    [](zhost_plugin_instance* self, zhost_step_args*) { return refuse(self); }};
const zhost_plugin_api kApi = [] {
  zhost_plugin_api api{};
  api.struct_size = sizeof(api);
  api.create = Instance::create;
  api.destroy = Instance::destroy;
  api.partition = &kPartition;
  return api;
}();

const zhost_plugin_descriptor* describe() {
  static zhost::sdk::DescriptorBuilder builder(FIXTURE_NAME, "0.0.1", ZHOST_KIND_PARTITION);
  builder.summary("CLI test fixture")
      .provides({FIXTURE_PROVIDES})
      .config_int("zero.reduce_bucket_size", 500000000, "elements per gradient bucket", 1, 1e12);
#ifdef FIXTURE_OVERLAP_KEY
  builder.config_bool("zero.overlap_comm", false, "overlap gradient reduction with backward");
#endif
  return builder.build();
}

}  // namespace

ZHOST_PLUGIN_ENTRY(describe(), &kApi)
