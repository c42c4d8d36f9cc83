// tests/services/param_store_test.cpp: the host side of partitioned parameters (zhost_param_services): a model
// built without storage, parameters bound to one flat storage that is materialised and released, initial
// values computed for any element range, and autograd's saved views following the storage.
#include "host/services/param_store.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>

#include "host/core/error.hpp"
#include "host/model/model.hpp"
#include "host/services/host_services.hpp"
#include "zhost/kit/dlpack_views.hpp"

namespace zhost {
namespace {

// The parameter services' calls with their args structs (zhost/host.h), in positional form for the tests.
zhost_status* group_create(const zhost_param_services* p, zhost_host_context* ctx, const uint32_t* ids,
                           const int64_t* offsets, size_t count, int64_t numel, zhost_param_group** out) {
  zhost_param_group_create_args args{sizeof(args), nullptr, ids, offsets, count, numel, nullptr};
  zhost_status* status = p->group_create(ctx, &args);
  *out = args.group;
  return status;
}
zhost_status* materialize(const zhost_param_services* p, zhost_host_context* ctx, zhost_param_group* group,
                          DLTensor* flat) {
  zhost_param_group_args args{};
  args.struct_size = sizeof(args);
  args.group = group;
  zhost_status* status = p->materialize(ctx, &args);
  *flat = args.flat;
  return status;
}
zhost_status* release(const zhost_param_services* p, zhost_host_context* ctx, zhost_param_group* group) {
  zhost_param_group_args args{};
  args.struct_size = sizeof(args);
  args.group = group;
  return p->release(ctx, &args);
}
zhost_status* initial_values(const zhost_param_services* p, zhost_host_context* ctx, uint32_t id, int64_t offset,
                             DLTensor* dst) {
  zhost_initial_values_args args{sizeof(args), nullptr, id, offset, dst};
  return p->initial_values(ctx, &args);
}

model::ModelSpec spec() {
  model::ModelSpec s;
  s.type = "llama";
  s.layers = 2;
  s.heads = 2;
  s.width = 32;
  s.vocab = 64;
  s.seq_len = 8;
  s.seed = 11;
  return s;
}

std::unique_ptr<model::Model> unmaterialised() {
  return model::make_model(spec(), model::Placement{at::kCPU, at::kFloat, false});
}

void check(zhost_status* status) { HostServices::throw_if_error(status, "param services"); }

TEST(ParamStore, UnmaterialisedModelHasShapesAndInitialValuesOfAnyRange) {
  auto full = model::make_model(spec());
  auto bare = unmaterialised();
  ASSERT_EQ(full->parameters().size(), bare->parameters().size());
  EXPECT_EQ(full->num_parameters(), bare->num_parameters());
  for (size_t i = 0; i < bare->parameters().size(); ++i) {
    const at::Tensor& p = bare->parameters()[i].tensor;
    EXPECT_EQ(p.sizes(), full->parameters()[i].tensor.sizes());
    EXPECT_EQ(p.storage().nbytes(), 0u) << bare->parameters()[i].name;
    // Elements [n/3, n/3 + len) with padding past the end: the same bits as the materialised model's.
    const int64_t n = p.numel(), offset = n / 3, length = n - offset + 5;
    at::Tensor range = at::empty({length});
    bare->init_parameter_shard(i, offset, range);
    at::Tensor expected = full->parameters()[i].tensor.detach().reshape({-1}).narrow(0, offset, n - offset);
    EXPECT_TRUE(at::equal(range.narrow(0, 0, n - offset), expected)) << bare->parameters()[i].name;
    EXPECT_TRUE(at::equal(range.narrow(0, n - offset, 5), at::zeros({5})));
  }
}

TEST(ParamStore, AGroupSharesOneStorageThatIsMaterialisedAndReleased) {
  auto bare = unmaterialised();
  auto full = model::make_model(spec());
  HostServices services;
  zhost_host_context* ctx = services.create_context(PluginContextSpec{"stage3", {}});
  ParamStore store(*bare, services);
  const zhost_param_services* params = services.table()->params;
  ASSERT_NE(params, nullptr);
  // Block 1's parameters, packed with a gap of 3 elements after each.
  std::vector<uint32_t> ids;
  std::vector<int64_t> offsets;
  int64_t numel = 0;
  for (size_t id : bare->params_used_by_block()[1]) {
    ids.push_back(static_cast<uint32_t>(id));
    offsets.push_back(numel);
    numel += bare->parameters()[id].tensor.numel() + 3;
  }
  zhost_param_group* group = nullptr;
  check(group_create(params, ctx, ids.data(), offsets.data(), ids.size(), numel, &group));
  EXPECT_FALSE(store.has_storage(ids[0]));
  EXPECT_EQ(store.live_bytes(), 0u);

  DLTensor flat{};
  check(materialize(params, ctx, group, &flat));
  EXPECT_TRUE(store.has_storage(ids[0]));
  EXPECT_EQ(store.live_bytes(), static_cast<uint64_t>(numel * 4));
  at::Tensor storage = kit::tensor_view(flat);
  ASSERT_EQ(storage.numel(), numel);
  for (size_t i = 0; i < ids.size(); ++i) {  // fill each parameter's place with its initial values
    at::Tensor place = storage.narrow(0, offsets[i], bare->parameters()[ids[i]].tensor.numel());
    DLTensor dst = kit::dl_view(place);
    check(initial_values(params, ctx, ids[i], 0, &dst));
  }
  for (uint32_t id : ids)  // the parameters are views of it: the unpartitioned model's values
    EXPECT_TRUE(at::equal(bare->parameters()[id].tensor.detach(), full->parameters()[id].tensor.detach()))
        << bare->parameters()[id].name;

  check(release(params, ctx, group));
  EXPECT_FALSE(store.has_storage(ids[0]));
  EXPECT_EQ(bare->parameters()[ids[0]].tensor.storage().nbytes(), 0u);
  EXPECT_EQ(store.live_bytes(), 0u);
  EXPECT_EQ(store.peak_bytes(), static_cast<uint64_t>(numel * 4));

  // A parameter joins one group only; offsets must fit.
  zhost_param_group* other = nullptr;
  EXPECT_THROW(check(group_create(params, ctx, ids.data(), offsets.data(), 1, numel, &other)), Error);
  const uint32_t head = static_cast<uint32_t>(bare->params_used_by_block().back().back());
  const int64_t too_far = 10;
  EXPECT_THROW(check(group_create(params, ctx, &head, &too_far, 1, 4, &other)), Error);
  // A call refused at its second parameter binds none: the first stays free for a later group.
  const uint32_t pair[] = {head, 100000};
  const int64_t pair_offsets[] = {0, 0};
  EXPECT_THROW(check(group_create(params, ctx, pair, pair_offsets, 2, 1 << 20, &other)), Error);
  EXPECT_FALSE(store.has_storage(head));
  const int64_t at_start = 0;
  check(group_create(params, ctx, &head, &at_start, 1, bare->parameters()[head].tensor.numel(), &other));
}

// Resident bytes of this process, from /proc/self/statm.
double resident_mb() {
  std::ifstream statm("/proc/self/statm");
  long pages = 0, resident = 0;
  statm >> pages >> resident;
  return static_cast<double>(resident) * static_cast<double>(sysconf(_SC_PAGESIZE)) / (1 << 20);
}

// Released parameter storage leaves the process at once, whatever malloc serves everything else: stage 3's
// memory per rank falls back after each block (page_allocator.hpp).
TEST(ParamStore, ReleasedStorageLeavesTheProcess) {
  auto bare = unmaterialised();
  HostServices services;
  zhost_host_context* ctx = services.create_context(PluginContextSpec{"stage3", {}});
  ParamStore store(*bare, services);
  const zhost_param_services* params = services.table()->params;
  const uint32_t id = 0;
  const int64_t offset = 0, numel = int64_t{64} << 18;  // 64 MiB of fp32
  zhost_param_group* group = nullptr;
  check(group_create(params, ctx, &id, &offset, 1, numel, &group));
  for (int round = 0; round < 3; ++round) {
    const double before = resident_mb();
    DLTensor flat{};
    check(materialize(params, ctx, group, &flat));
    kit::tensor_view(flat).fill_(1.0f);
    EXPECT_GT(resident_mb() - before, 60.0) << "round " << round;
    const double materialised = resident_mb();
    check(release(params, ctx, group));
    EXPECT_GT(materialised - resident_mb(), 60.0) << "round " << round;
  }
}

// A linear layer saves a view of its weight (weight.t()) for backward. Released between forward and
// backward and materialised again with other values, the backward reads the new values: the saved view
// shares the group's storage instead of keeping a stale copy alive.
TEST(ParamStore, AutogradSavedViewsFollowTheStorage) {
  auto bare = unmaterialised();
  HostServices services;
  zhost_host_context* ctx = services.create_context(PluginContextSpec{"stage3", {}});
  ParamStore store(*bare, services);
  const zhost_param_services* params = services.table()->params;
  const at::Tensor& weight = bare->parameters()[0].tensor;  // the token embedding [V, C], used as a matrix here
  const uint32_t id = 0;
  const int64_t offset = 0;
  zhost_param_group* group = nullptr;
  check(group_create(params, ctx, &id, &offset, 1, weight.numel(), &group));
  DLTensor flat{};
  check(materialize(params, ctx, group, &flat));
  kit::tensor_view(flat).normal_();

  at::Tensor x = at::randn({3, weight.size(1)}).requires_grad_(true);
  at::Tensor y = at::linear(x, weight);  // [3, V]
  check(release(params, ctx, group));
  check(materialize(params, ctx, group, &flat));
  at::Tensor later = kit::tensor_view(flat).view(weight.sizes());
  later.uniform_();
  y.sum().backward();
  // d(sum(x W^T))/dx = ones[3, V] @ W: each row is the column sums of the weight now in storage.
  at::Tensor expected = later.sum(0).expand({3, weight.size(1)});
  EXPECT_TRUE(at::allclose(x.grad(), expected, 1e-5, 1e-5));
  ASSERT_TRUE(weight.grad().defined());
  EXPECT_EQ(weight.grad().sizes(), weight.sizes());
}

}  // namespace
}  // namespace zhost
