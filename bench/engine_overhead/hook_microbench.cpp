// bench/engine_overhead/hook_microbench.cpp: what one partition hook call and one DLTensor view cost.
//   noop_hook_call        pre_forward through the ABI table: stage 0's hook body is empty, so this is
//                         the price of the call itself (indirect call, status check)
//   grad_ready_no_reduce  grad_ready on a micro-batch that does not reduce (accumulation): the plugin's
//                         exception guard and instance lookup, then an early return
//   dl_view               at::Tensor -> DLTensor (the trainer makes one per gradient hand-over)
//   tensor_view           DLTensor -> at::Tensor (stage 0 makes one per gradient on reducing micro-batches)
#include "bench/engine_overhead/hook_microbench.hpp"

#include <ATen/ATen.h>
#include <benchmark/benchmark.h>

#include "host/core/error.hpp"
#include "host/plugins/instances.hpp"
#include "zhost/kit/dlpack_views.hpp"
#include "zhost/partition.h"

namespace zhost::bench {
namespace {

struct PartitionUnderTest {
  const zhost_partition_api* api;
  zhost_plugin_instance* instance;
};

void check_ok(zhost_status* status, const char* hook) { HostServices::throw_if_error(status, hook); }

void register_cases(const PartitionUnderTest& partition, const at::Tensor& grad) {
  benchmark::RegisterBenchmark("noop_hook_call", [partition](benchmark::State& state) {
    zhost_block_args block{sizeof(zhost_block_args), nullptr, 0};
    for (auto _ : state) {
      benchmark::DoNotOptimize(block);
      zhost_status* status = partition.api->pre_forward(partition.instance, &block);
      benchmark::DoNotOptimize(status);
      if (status) check_ok(status, "pre_forward");
    }
  });
  benchmark::RegisterBenchmark("grad_ready_no_reduce", [partition, grad](benchmark::State& state) {
    zhost_micro_batch_args accumulating{sizeof(zhost_micro_batch_args), nullptr, 1, 0, 0};
    check_ok(partition.api->begin_micro_batch(partition.instance, &accumulating), "begin_micro_batch");
    DLTensor view = kit::dl_view(grad);
    const zhost_grad_ready_args ready{sizeof(zhost_grad_ready_args), nullptr, 0, &view};
    for (auto _ : state) {
      zhost_status* status = partition.api->grad_ready(partition.instance, &ready);
      benchmark::DoNotOptimize(status);
      if (status) check_ok(status, "grad_ready");
    }
  });
  benchmark::RegisterBenchmark("dl_view", [grad](benchmark::State& state) {
    for (auto _ : state) {
      DLTensor view = kit::dl_view(grad);
      benchmark::DoNotOptimize(view);
    }
  });
  benchmark::RegisterBenchmark("tensor_view", [grad](benchmark::State& state) {
    DLTensor view = kit::dl_view(grad);
    for (auto _ : state) {
      at::Tensor tensor = kit::tensor_view(view);
      benchmark::DoNotOptimize(tensor);
    }
  });
}

}  // namespace

int run_hook_benchmarks(JobSetup& job, int argc, char** argv) {
  PluginInstances instances(*job.services);
  instances.create_all(job.resolution, [&](const LoadedPlugin& p) { return job.plugin_config(p); });
  const PluginInstance* partition = instances.of_kind(ZHOST_KIND_PARTITION);
  if (!partition) fail("the bench config resolved no partition plugin");
  const int64_t width = job.config->get_int("model.width");
  at::Tensor grad = at::ones({width, width});  // the shape of a projection's gradient

  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  register_cases({partition->plugin->api->partition, partition->instance}, grad);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace zhost::bench
