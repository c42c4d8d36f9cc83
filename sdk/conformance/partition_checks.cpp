// sdk/conformance/partition_checks.cpp: what the kit checks of a partition plugin without a process group:
// the table's required hooks, the flags that constrain it, and that setup() without collectives fails
// cleanly (a status, no crash) on an instance that is then destroyed. Training itself is not covered: the
// hooks need the host's collectives, parameters and autograd (zhost's own multi-rank tests drive them).
#include <string>

#include "checks.hpp"

namespace zhost::conformance {

void check_partition(const CheckRun& run) {
  const zhost_partition_api* table = run.plugin.api().partition;
  if (!table) return;  // reported by the descriptor check
  const uint64_t flags = run.plugin.descriptor().flags;

  run.check("partition: required hooks and flag-bound functions are set", [&] {
    expect(table->struct_size >= ZHOST_PARTITION_API_MIN_SIZE, "partition table smaller than 1.0's");
    expect(table->setup && table->begin_micro_batch && table->pre_forward && table->post_forward &&
               table->pre_backward && table->grad_ready && table->post_backward && table->backward_end && table->step,
           "a required hook is NULL");
    if (flags & ZHOST_PLUGIN_FLAG_PARTITIONS_PARAMETERS)
      expect(table->gather_param != nullptr, "ZHOST_PLUGIN_FLAG_PARTITIONS_PARAMETERS needs gather_param");
    expect(!(flags & (ZHOST_PLUGIN_FLAG_TIER_STORES | ZHOST_PLUGIN_FLAG_TIER_COMPUTES)),
           "a partition plugin declares tier roles");
  });

  run.check("partition: setup without a process group fails cleanly", [&] {
    auto host = run.host();
    Instance instance(run.plugin, *host);
    expect(instance.get() != nullptr, "create failed: " + instance.error());
    zhost_partition_setup setup{};
    setup.struct_size = sizeof(setup);
    setup.optimizer.struct_size = sizeof(setup.optimizer);
    setup.optimizer.kind = ZHOST_OPTIMIZER_ADAMW;
    setup.master_dtype = DLDataType{kDLFloat, 32, 1};
    setup.gradient_accumulation_steps = 1;
    zhost_status_code code = ZHOST_OK;
    const std::string message = host->take_message(table->setup(instance.get(), &setup), &code);
    expect(code != ZHOST_OK, "setup() succeeded without collectives or parameters");
    expect(!message.empty(), "setup() failed without a message");
  });

  run.report.not_covered.push_back(
      "partition hooks, step and gather_param: they need a process group, the host's parameters and autograd "
      "(covered by zhost's multi-rank equality tests)");
}

}  // namespace zhost::conformance
