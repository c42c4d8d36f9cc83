// tests/offload_cpu/tier_test.cpp: the offload_cpu plugin through its ABI, loaded from its shared object
// by the host's own loader: buffers stored and loaded by key, an optimizer group stepped, and the hot-swap
// contract: a second instance that imports the first one's exported state continues bit for bit; a group
// stepped in ranges (as stages pipeline their copies to the device) equals one whole step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "host/plugins/instances.hpp"
#include "host/plugins/loader.hpp"
#include "host/plugins/resolver.hpp"
#include "host/services/host_services.hpp"
#include "zhost/zhost.h"

using namespace zhost;

namespace {

constexpr int64_t kElements = 1001;  // not a multiple of any vector width

DLTensor view(std::vector<float>& values, int64_t& shape) {
  shape = static_cast<int64_t>(values.size());
  DLTensor t{};
  t.data = values.data();
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = DLDataType{kDLFloat, 32, 1};
  t.shape = &shape;
  return t;
}

std::vector<float> random_values(uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(kElements);
  for (auto& x : v) x = normal(rng);
  return v;
}

void check(const HostServices& host, zhost_status* status) {
  if (!status) return;
  std::string message = host.table()->status_message(status);
  host.table()->status_destroy(status);
  FAIL() << message;
}

struct Tier {
  Tier(HostServices& host, const Resolution& resolution) : host(host), instances(host) {
    instances.create_all(resolution, [](const LoadedPlugin&) {
      return std::map<std::string, ConfigValue>{{"zero.offload_optimizer.pin_memory", false},
                                                {"offload_cpu.threads", int64_t{1}},
                                                {"offload_cpu.storage_chunk_elements", int64_t{1} << 20},
                                                {"zero.offload_optimizer.buffer_count", int64_t{4}},
                                                {"zero.offload_optimizer.pipeline_read", false},
                                                {"zero.offload_optimizer.pipeline_write", false}};
    });
    const PluginInstance* live = instances.of_kind(ZHOST_KIND_OFFLOAD);
    instance = live->instance;
    storage = live->plugin->api->storage;
    api = live->plugin->api->optimizer;
  }
  // One step on `grad` (written into the accumulator); returns the updated fp32 values.
  std::vector<float> step(const std::vector<float>& grad, int64_t step_number) {
    add_to_accumulator(grad);
    std::vector<float> out(kElements);
    int64_t shape = 0;
    DLTensor out_view = view(out, shape);
    zhost_tier_step_args args = step_args(step_number, out_view);
    check(host, api->step(instance, &args));
    return out;
  }
  // The same step as step(), taken as range steps of `piece` elements (how a stage pipelines copies).
  std::vector<float> step_in_pieces(const std::vector<float>& grad, int64_t step_number, int64_t piece) {
    add_to_accumulator(grad);
    std::vector<float> out(kElements);
    int64_t shape = 0;
    DLTensor part = view(out, shape);
    for (int64_t offset = 0; offset < kElements; offset += piece) {
      shape = std::min<int64_t>(piece, kElements - offset);
      part.data = out.data() + offset;
      zhost_tier_step_args args = step_args(step_number, part);
      args.offset = offset;
      check(host, api->step_range(instance, &args));
    }
    return out;
  }
  void add_to_accumulator(const std::vector<float>& grad) {
    zhost_tier_grad_args accumulator{};
    accumulator.struct_size = sizeof(accumulator);
    accumulator.key = 7;
    check(host, api->grad(instance, &accumulator));
    std::memcpy(accumulator.grad.data, grad.data(), grad.size() * sizeof(float));
  }
  static zhost_tier_step_args step_args(int64_t step_number, DLTensor& out) {
    zhost_tier_step_args args{};
    args.struct_size = sizeof(args);
    args.key = 7;
    args.step = step_number;
    args.lr = 1e-2;
    args.grad_scale = 0.5;
    args.params_out = &out;
    return args;
  }
  HostServices& host;
  PluginInstances instances;
  zhost_plugin_instance* instance = nullptr;
  const zhost_storage_api* storage = nullptr;
  const zhost_optimizer_tier_api* api = nullptr;
};

int32_t write_to_vector(void* user, const void* bytes, size_t len) {
  auto* out = static_cast<std::vector<char>*>(user);
  out->insert(out->end(), static_cast<const char*>(bytes), static_cast<const char*>(bytes) + len);
  return 0;
}

struct VectorReader {
  const std::vector<char>* data;
  size_t at = 0;
};
int64_t read_from_vector(void* user, void* bytes, size_t capacity) {
  auto* reader = static_cast<VectorReader*>(user);
  const size_t n = std::min(capacity, reader->data->size() - reader->at);
  std::memcpy(bytes, reader->data->data() + reader->at, n);
  reader->at += n;
  return static_cast<int64_t>(n);
}

}  // namespace

TEST(CpuTier, StoresStepsAndHotSwapsBitForBit) {
  HostServices host;
  std::vector<LoadedPlugin> found{
      PluginLoader(host).load(std::string(ZHOST_PLUGIN_BUILD_DIR) + "/zhost_offload_cpu.so")};
  ASSERT_NE(found[0].info.flags & ZHOST_PLUGIN_FLAG_HOT_SWAPPABLE, 0u);
  Resolution resolution = resolve_plugins({{"offload:cpu", "test"}}, found);
  Tier first(host, resolution), second(host, resolution);

  // A plain buffer round-trips by key.
  std::vector<float> stored = random_values(1, 1.0f), loaded(kElements);
  int64_t shape_a = 0, shape_b = 0;
  DLTensor stored_view = view(stored, shape_a), loaded_view = view(loaded, shape_b);
  zhost_tier_io_args io{sizeof(io), nullptr, 42, &stored_view, nullptr};
  check(host, first.storage->store(first.instance, &io));
  io.data = &loaded_view;
  check(host, first.storage->load(first.instance, &io));
  EXPECT_EQ(loaded, stored);

  // An AdamW group: three steps on the first instance.
  zhost_optimizer_desc adamw{};
  adamw.struct_size = sizeof(adamw);
  adamw.kind = ZHOST_OPTIMIZER_ADAMW;
  adamw.beta1 = 0.9;
  adamw.beta2 = 0.999;
  adamw.eps = 1e-8;
  adamw.weight_decay = 0.01;
  adamw.bias_correction = 1;
  std::vector<float> master = random_values(2, 0.1f);
  int64_t master_shape = 0;
  DLTensor master_view = view(master, master_shape);
  zhost_tier_optimizer_setup setup{sizeof(setup), nullptr, 7, &adamw, &master_view};
  check(host, first.api->setup(first.instance, &setup));
  std::vector<float> updated;
  for (int64_t s = 1; s <= 3; ++s) updated = first.step(random_values(10 + s, 1.0f), s);
  EXPECT_NE(updated, master);  // it moved

  // Hot swap: the second instance imports the first's state; both continue identically.
  std::vector<char> state;
  zhost_tier_stream_args export_args{sizeof(export_args), nullptr, write_to_vector, nullptr, &state};
  check(host, first.storage->export_state(first.instance, &export_args));
  VectorReader reader{&state};
  zhost_tier_stream_args in{sizeof(in), nullptr, nullptr, read_from_vector, &reader};
  check(host, second.storage->import_state(second.instance, &in));
  for (int64_t s = 4; s <= 5; ++s) {
    const std::vector<float> grad = random_values(10 + s, 1.0f);
    EXPECT_EQ(first.step(grad, s), second.step(grad, s)) << "step " << s;
  }
  std::fill(loaded.begin(), loaded.end(), 0.0f);
  io.data = &loaded_view;
  check(host, second.storage->load(second.instance, &io));
  EXPECT_EQ(loaded, stored) << "stored buffers travel with the state";

  // A truncated state is refused with a one-line error, leaving the instance as it was.
  state.resize(state.size() / 2);
  VectorReader truncated{&state};
  zhost_tier_stream_args in_truncated{sizeof(in_truncated), nullptr, nullptr, read_from_vector, &truncated};
  zhost_status* error = second.storage->import_state(second.instance, &in_truncated);
  ASSERT_NE(error, nullptr);
  EXPECT_NE(std::string(host.table()->status_message(error)).find("ends early"), std::string::npos);
  host.table()->status_destroy(error);
  const std::vector<float> grad = random_values(20, 1.0f);
  EXPECT_EQ(first.step(grad, 6), second.step(grad, 6));

  // Range steps: the group stepped in odd-sized pieces equals one whole step bit for bit, and each range's
  // accumulator is zeroed (the next whole steps agree again).
  ASSERT_NE(second.api->step_range, nullptr);
  for (int64_t s = 7; s <= 8; ++s) {
    const std::vector<float> g = random_values(30 + s, 1.0f);
    EXPECT_EQ(first.step(g, s), second.step_in_pieces(g, s, s == 8 ? 101 : 97)) << "step " << s;
  }
  const std::vector<float> g = random_values(40, 1.0f);
  EXPECT_EQ(first.step(g, 9), second.step(g, 9));

  // A range past the group's end is refused.
  std::vector<float> out(10);
  int64_t out_shape = 0;
  DLTensor out_view = view(out, out_shape);
  zhost_tier_step_args args = Tier::step_args(10, out_view);
  args.offset = kElements - 5;
  zhost_status* outside = second.api->step_range(second.instance, &args);
  ASSERT_NE(outside, nullptr);
  EXPECT_NE(std::string(host.table()->status_message(outside)).find("is outside group 7"), std::string::npos);
  host.table()->status_destroy(outside);
}
