// tests/offload_cpu/tier_test.cpp: the offload_cpu plugin through its ABI, loaded from its shared object
// by the host's own loader: buffers stored and loaded by key, an optimizer group stepped, and the hot-swap
// contract: a second instance that imports the first one's exported state continues bit for bit; a group
// stepped in ranges (as stages pipeline their copies to the device) equals one whole step. With bf16 master
// weights (Note [bf16 master weights]): the bytes the tier holds, the bf16 rounding of what it keeps, and state
// ranges (checkpoints) that move between an fp32 tier and a bf16 one both ways.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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

// The AdamW group the tests step.
zhost_optimizer_desc adamw_desc() {
  zhost_optimizer_desc adamw{};
  adamw.struct_size = sizeof(adamw);
  adamw.kind = ZHOST_OPTIMIZER_ADAMW;
  adamw.beta1 = 0.9;
  adamw.beta2 = 0.999;
  adamw.eps = 1e-8;
  adamw.weight_decay = 0.01;
  adamw.bias_correction = 1;
  return adamw;
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
  Tier(HostServices& host, const Resolution& resolution, bool bf16_master = false, bool bf16_states = false)
      : host(host), instances(host) {
    instances.create_all(resolution, [bf16_master, bf16_states](const LoadedPlugin&) {
      return std::map<std::string, ConfigValue>{{"zero.offload_optimizer.pin_memory", false},
                                                {"bf16.master_weights_and_grads", bf16_master},
                                                {"bf16.optimizer_states", bf16_states},
                                                {"fp16.master_weights_and_grads", false},
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
  // One step on `grad`, writing the updated weights in bf16 (as a bf16 job's stage asks).
  std::vector<uint16_t> step_bf16(const std::vector<float>& grad, int64_t step_number) {
    add_to_accumulator(grad);
    std::vector<uint16_t> out(kElements);
    int64_t shape = kElements;
    DLTensor out_view{};
    out_view.data = out.data();
    out_view.device = DLDevice{kDLCPU, 0};
    out_view.ndim = 1;
    out_view.dtype = DLDataType{kDLBfloat, 16, 1};
    out_view.shape = &shape;
    zhost_tier_step_args args = step_args(step_number, out_view);
    check(host, api->step(instance, &args));
    return out;
  }
  // State `name` of group 7 as fp32 (a checkpoint's read), and written from fp32 (a resume's write).
  std::vector<float> read_state(const char* name) {
    std::vector<float> values(kElements);
    int64_t shape = 0;
    DLTensor t = view(values, shape);
    zhost_tier_state_args args{sizeof(args), nullptr, 7, name, 0, &t};
    check(host, api->read_state(instance, &args));
    return values;
  }
  void write_state(const char* name, std::vector<float> values) {
    int64_t shape = 0;
    DLTensor t = view(values, shape);
    zhost_tier_state_args args{sizeof(args), nullptr, 7, name, 0, &t};
    check(host, api->write_state(instance, &args));
  }
  uint64_t host_bytes() {
    zhost_tier_memory memory{};
    memory.struct_size = sizeof(memory);
    check(host, api->memory(instance, &memory));
    return memory.host_bytes;
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
  zhost_optimizer_desc adamw = adamw_desc();
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

namespace {

void setup_group(Tier& tier, const zhost_optimizer_desc& desc, std::vector<float> master) {
  int64_t shape = 0;
  DLTensor master_view = view(master, shape);
  zhost_tier_optimizer_setup setup{sizeof(setup), nullptr, 7, &desc, &master_view};
  check(tier.host, tier.api->setup(tier.instance, &setup));
}

uint16_t bf16_bits(float x) {
  uint32_t u = 0;
  std::memcpy(&u, &x, 4);
  return static_cast<uint16_t>(u >> 16);
}
bool is_bf16_value(float x) {
  uint32_t u = 0;
  std::memcpy(&u, &x, 4);
  return (u & 0xFFFFu) == 0;
}

}  // namespace

TEST(CpuTierBf16Master, HoldsTwoByteMastersRoundedAndResumesAcrossPrecisions) {
  HostServices host;
  std::vector<LoadedPlugin> found{
      PluginLoader(host).load(std::string(ZHOST_PLUGIN_BUILD_DIR) + "/zhost_offload_cpu.so")};
  Resolution resolution = resolve_plugins({{"offload:cpu", "test"}}, found);
  Tier fp32(host, resolution), bf16(host, resolution, /*bf16_master=*/true);
  const zhost_optimizer_desc adamw = adamw_desc();
  const std::vector<float> initial = random_values(2, 0.1f);
  setup_group(fp32, adamw, initial);
  setup_group(bf16, adamw, initial);

  // The bytes it holds: a 2-byte master, fp32 moments and accumulator (14 per element against 16).
  EXPECT_EQ(fp32.host_bytes(), uint64_t{16} * kElements);
  EXPECT_EQ(bf16.host_bytes(), uint64_t{14} * kElements);

  // The master it keeps is the initial fp32 rounded to nearest even, and stays bf16 after each step; the bf16
  // weights it writes are the master's bits.
  std::vector<float> master = bf16.read_state("master");
  for (int64_t i = 0; i < kElements; ++i) {
    ASSERT_TRUE(is_bf16_value(master[i])) << i;
    EXPECT_LE(std::fabs(initial[i] - master[i]), std::fabs(initial[i]) * (1.0f / 256)) << i;  // half a bf16 ulp
  }
  for (int64_t s = 1; s <= 3; ++s) {
    const std::vector<uint16_t> weights = bf16.step_bf16(random_values(10 + s, 1.0f), s);
    master = bf16.read_state("master");
    for (int64_t i = 0; i < kElements; ++i) {
      ASSERT_TRUE(is_bf16_value(master[i])) << "step " << s << ", element " << i;
      ASSERT_EQ(weights[i], bf16_bits(master[i])) << "step " << s << ", element " << i;
    }
    fp32.step(random_values(10 + s, 1.0f), s);
  }
  EXPECT_NE(master, fp32.read_state("master"));  // bf16 masters round every update

  // Hot swap: a second bf16 tier importing the first's state continues bit for bit.
  Tier swapped(host, resolution, /*bf16_master=*/true);
  std::vector<char> state;
  zhost_tier_stream_args export_args{sizeof(export_args), nullptr, write_to_vector, nullptr, &state};
  check(host, bf16.storage->export_state(bf16.instance, &export_args));
  VectorReader reader{&state};
  zhost_tier_stream_args in{sizeof(in), nullptr, nullptr, read_from_vector, &reader};
  check(host, swapped.storage->import_state(swapped.instance, &in));
  EXPECT_EQ(swapped.step_bf16(random_values(20, 1.0f), 4), bf16.step_bf16(random_values(20, 1.0f), 4));

  // A checkpoint of the bf16 tier resumed by an fp32 one: the same values, exactly; and an fp32 checkpoint resumed
  // by a bf16 tier: its masters rounded once, its moments as they were.
  for (const char* name : {"master", "exp_avg", "exp_avg_sq"}) fp32.write_state(name, bf16.read_state(name));
  EXPECT_EQ(fp32.read_state("master"), bf16.read_state("master"));
  Tier resumed(host, resolution, /*bf16_master=*/true);
  setup_group(resumed, adamw, std::vector<float>(kElements, 0.0f));
  for (const char* name : {"master", "exp_avg", "exp_avg_sq"}) resumed.write_state(name, fp32.read_state(name));
  const std::vector<float> full = fp32.read_state("master"), rounded = resumed.read_state("master");
  for (int64_t i = 0; i < kElements; ++i) {
    ASSERT_TRUE(is_bf16_value(rounded[i])) << i;
    EXPECT_LE(std::fabs(full[i] - rounded[i]), std::fabs(full[i]) * (1.0f / 256)) << i;
  }
  EXPECT_EQ(resumed.read_state("exp_avg"), fp32.read_state("exp_avg"));
}

// DeepSpeed's bf16 masters need its CPU Adam: a Lion group is refused in one line.
TEST(CpuTierBf16Master, RefusesLion) {
  HostServices host;
  std::vector<LoadedPlugin> found{
      PluginLoader(host).load(std::string(ZHOST_PLUGIN_BUILD_DIR) + "/zhost_offload_cpu.so")};
  Resolution resolution = resolve_plugins({{"offload:cpu", "test"}}, found);
  Tier bf16(host, resolution, /*bf16_master=*/true);
  zhost_optimizer_desc lion = adamw_desc();
  lion.kind = ZHOST_OPTIMIZER_LION;
  std::vector<float> master = random_values(2, 0.1f);
  int64_t shape = 0;
  DLTensor master_view = view(master, shape);
  zhost_tier_optimizer_setup setup{sizeof(setup), nullptr, 7, &lion, &master_view};
  zhost_status* error = bf16.api->setup(bf16.instance, &setup);
  ASSERT_NE(error, nullptr);
  EXPECT_NE(std::string(host.table()->status_message(error)).find("built for Adam and AdamW"), std::string::npos);
  host.table()->status_destroy(error);
}

// bf16 optimizer states too: 10 bytes per element (2 + 2 + 2 and the fp32 accumulator), moments that stay bf16
// values step after step, and an fp32 checkpoint's moments rounded once on resume.
TEST(CpuTierBf16States, HoldsTwoByteMomentsRounded) {
  HostServices host;
  std::vector<LoadedPlugin> found{
      PluginLoader(host).load(std::string(ZHOST_PLUGIN_BUILD_DIR) + "/zhost_offload_cpu.so")};
  Resolution resolution = resolve_plugins({{"offload:cpu", "test"}}, found);
  Tier fp32(host, resolution), states(host, resolution, /*bf16_master=*/true, /*bf16_states=*/true);
  const zhost_optimizer_desc adamw = adamw_desc();
  const std::vector<float> initial = random_values(2, 0.1f);
  setup_group(fp32, adamw, initial);
  setup_group(states, adamw, initial);
  EXPECT_EQ(states.host_bytes(), uint64_t{10} * kElements);
  for (int64_t s = 1; s <= 3; ++s) {
    const std::vector<uint16_t> weights = states.step_bf16(random_values(10 + s, 1.0f), s);
    fp32.step(random_values(10 + s, 1.0f), s);
    const std::vector<float> master = states.read_state("master");
    for (const char* name : {"exp_avg", "exp_avg_sq"}) {
      const std::vector<float> moment = states.read_state(name);
      for (int64_t i = 0; i < kElements; ++i) ASSERT_TRUE(is_bf16_value(moment[i])) << name << " " << i;
    }
    for (int64_t i = 0; i < kElements; ++i) ASSERT_EQ(weights[i], bf16_bits(master[i])) << i;
  }
  // An fp32 checkpoint resumed: each moment rounded to nearest even, within half a bf16 ulp.
  for (const char* name : {"master", "exp_avg", "exp_avg_sq"}) {
    states.write_state(name, fp32.read_state(name));
    const std::vector<float> full = fp32.read_state(name), rounded = states.read_state(name);
    for (int64_t i = 0; i < kElements; ++i) {
      ASSERT_TRUE(is_bf16_value(rounded[i])) << name << " " << i;
      EXPECT_LE(std::fabs(full[i] - rounded[i]), std::fabs(full[i]) * (1.0f / 256)) << name << " " << i;
    }
  }
}
