// host/services/param_store.cpp: parameter groups over shared, releasable storage
// (see the header).
#include "host/services/param_store.hpp"

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/Allocator.h>
#include <c10/core/Storage.h>
#include <fmt/format.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "host/model/model.hpp"
#include "host/services/host_services.hpp"
#include "host/services/page_allocator.hpp"
#include "host/services/plugin_struct.hpp"
#include "host/services/service_call.hpp"
#include "zhost/kit/dlpack_views.hpp"

struct zhost_param_group {
  std::vector<uint32_t> ids;
  int64_t numel = 0;
  size_t nbytes = 0;
  c10::Storage storage;
  at::ScalarType dtype = at::kFloat;
  int64_t shape[1] = {0};
  bool live = false;
};

namespace zhost {

struct ParamStore::State {
  model::Model* model = nullptr;
  std::vector<std::unique_ptr<zhost_param_group>> groups;
  std::vector<zhost_param_group*> group_of;  // per parameter id
  uint64_t live = 0, peak = 0, step_peak = 0;
  zhost_param_services table{};
};

namespace {

template <typename Body>
zhost_status* serve(zhost_host_context* ctx, const char* what, Body&& body) {
  return serve_call<ParamStore::State>(ctx, JobService::kParams, "params", what, std::forward<Body>(body));
}

zhost_status* group_create(zhost_host_context* ctx, zhost_param_group_create_args* args) {
  return serve(ctx, "group_create", [&](ParamStore::State& s) -> zhost_status* {
    if (zhost_status* refused = check_plugin_struct(args, ZHOST_PARAM_GROUP_CREATE_ARGS_MIN_SIZE,
                                                    "zhost_param_group_create_args", "params->group_create"))
      return refused;
    const uint32_t* ids = args->ids;
    const int64_t* offsets = args->offsets;
    const size_t count = args->count;
    const int64_t numel = args->numel;
    zhost_param_group** out = &args->group;
    if (!ids || !offsets || count == 0 || numel <= 0)
      return service_error(ZHOST_ERR_INVALID_ARGUMENT,
                           "params->group_create: needs ids, offsets, out, count > 0 and numel > 0");
    const auto& params = s.model->parameters();
    // Every id is checked before any is bound: a refused call leaves no parameter pointing at a group.
    std::vector<uint8_t> listed(params.size(), 0);
    for (size_t i = 0; i < count; ++i) {
      if (ids[i] >= params.size())
        return service_error(ZHOST_ERR_INVALID_ARGUMENT, fmt::format("params->group_create: no parameter {}", ids[i]));
      if (s.group_of[ids[i]] || listed[ids[i]])
        return service_error(ZHOST_ERR_INVALID_ARGUMENT,
                             fmt::format("params->group_create: parameter {} ('{}') is already in a group", ids[i],
                                         params[ids[i]].name));
      listed[ids[i]] = 1;
      const int64_t length = params[ids[i]].tensor.numel();
      if (offsets[i] < 0 || offsets[i] + length > numel)
        return service_error(
            ZHOST_ERR_INVALID_ARGUMENT,
            fmt::format(
                "params->group_create: parameter {} ('{}', {} elements) at offset {} does not fit in {} elements",
                ids[i], params[ids[i]].name, length, offsets[i], numel));
    }
    auto group = std::make_unique<zhost_param_group>();
    const at::Tensor& first = params[ids[0]].tensor;
    // A zero-byte, resizable storage with the training device's allocator; host memory comes from the page
    // allocator, so that a released group leaves the process (page_allocator.hpp).
    group->storage = at::empty({0}, first.options()).storage();
    if (first.device().is_cpu()) group->storage.unsafeGetStorageImpl()->set_allocator(page_allocator());
    group->dtype = first.scalar_type();
    group->numel = numel;
    group->nbytes = static_cast<size_t>(numel) * c10::elementSize(group->dtype);
    group->shape[0] = numel;
    for (size_t i = 0; i < count; ++i) {
      const at::Tensor& param = params[ids[i]].tensor;
      // A view of the group's storage in the parameter's shape: metadata only, nothing is allocated.
      at::Tensor view = at::empty({0}, param.options());
      c10::TensorImpl* impl = view.unsafeGetTensorImpl();
      impl->set_storage_keep_dtype(group->storage);
      impl->set_storage_offset(offsets[i]);
      impl->set_sizes_contiguous(param.sizes());
      at::Tensor handle = param;  // shares the model's TensorImpl
      handle.set_data(view);
      s.group_of[ids[i]] = group.get();
      group->ids.push_back(ids[i]);
    }
    *out = group.get();
    s.groups.push_back(std::move(group));
    return nullptr;
  });
}

zhost_status* materialize(zhost_host_context* ctx, zhost_param_group_args* args) {
  return serve(ctx, "materialize", [&](ParamStore::State& s) -> zhost_status* {
    if (zhost_status* refused =
            check_plugin_struct(args, ZHOST_PARAM_GROUP_ARGS_MIN_SIZE, "zhost_param_group_args", "params->materialize"))
      return refused;
    zhost_param_group* group = args->group;
    DLTensor* flat = &args->flat;
    if (!group) return service_error(ZHOST_ERR_INVALID_ARGUMENT, "params->materialize: needs a group and a DLTensor");
    c10::StorageImpl* impl = group->storage.unsafeGetStorageImpl();
    if (!group->live) {
      impl->set_data_ptr_noswap(impl->allocator()->allocate(group->nbytes));
      impl->set_nbytes(group->nbytes);
      group->live = true;
      s.live += group->nbytes;
      s.peak = std::max(s.peak, s.live);
      s.step_peak = std::max(s.step_peak, s.live);
    }
    *flat = DLTensor{};
    flat->data = group->storage.data_ptr().get();
    flat->device = kit::dl_device(group->storage.device());
    flat->ndim = 1;
    flat->dtype = kit::dl_dtype(group->dtype);
    flat->shape = group->shape;
    flat->strides = nullptr;
    return nullptr;
  });
}

zhost_status* release(zhost_host_context* ctx, zhost_param_group_args* args) {
  return serve(ctx, "release", [&](ParamStore::State& s) -> zhost_status* {
    if (zhost_status* refused =
            check_plugin_struct(args, ZHOST_PARAM_GROUP_ARGS_MIN_SIZE, "zhost_param_group_args", "params->release"))
      return refused;
    zhost_param_group* group = args->group;
    if (!group) return service_error(ZHOST_ERR_INVALID_ARGUMENT, "params->release: needs a group");
    if (!group->live) return nullptr;
    c10::StorageImpl* impl = group->storage.unsafeGetStorageImpl();
    impl->set_data_ptr_noswap(c10::DataPtr(nullptr, group->storage.device()));
    impl->set_nbytes(0);
    group->live = false;
    s.live -= group->nbytes;
    return nullptr;
  });
}

zhost_status* initial_values(zhost_host_context* ctx, zhost_initial_values_args* args) {
  return serve(ctx, "initial_values", [&](ParamStore::State& s) -> zhost_status* {
    if (zhost_status* refused = check_plugin_struct(args, ZHOST_INITIAL_VALUES_ARGS_MIN_SIZE,
                                                    "zhost_initial_values_args", "params->initial_values"))
      return refused;
    const uint32_t id = args->id;
    const int64_t offset = args->offset;
    DLTensor* dst = args->dst;
    if (!dst || id >= s.model->parameters().size() || offset < 0)
      return service_error(ZHOST_ERR_INVALID_ARGUMENT,
                           fmt::format("params->initial_values: bad arguments (parameter {}, offset {})", id, offset));
    at::Tensor target = kit::tensor_view(*dst);
    if (!target.is_contiguous())
      return service_error(
          ZHOST_ERR_INVALID_ARGUMENT,
          fmt::format("params->initial_values: the destination for parameter {} is not contiguous", id));
    s.model->init_parameter_shard(id, offset, target);
    return nullptr;
  });
}

}  // namespace

ParamStore::ParamStore(model::Model& model, HostServices& services)
    : state_(std::make_unique<State>()), services_(services) {
  state_->model = &model;
  state_->group_of.assign(model.parameters().size(), nullptr);
  zhost_param_services& t = state_->table;
  t.struct_size = sizeof(t);
  t.group_create = group_create;
  t.materialize = materialize;
  t.release = release;
  t.initial_values = initial_values;
  services_.set_job_state(JobService::kParams, state_.get());
  services_.set_param_services(&state_->table);
}

ParamStore::~ParamStore() {
  services_.set_param_services(nullptr);
  services_.set_job_state(JobService::kParams, nullptr);
}

bool ParamStore::has_storage(size_t id) const {
  const zhost_param_group* group = state_->group_of.at(id);
  return group && group->live;
}
uint64_t ParamStore::live_bytes() const { return state_->live; }
uint64_t ParamStore::peak_bytes() const { return state_->peak; }
void ParamStore::begin_step() { state_->step_peak = state_->live; }
uint64_t ParamStore::step_peak_bytes() const { return state_->step_peak; }

}  // namespace zhost
