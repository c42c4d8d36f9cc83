// host/model/model.cpp: the architecture-independent half of Model: spec checks, the parameter registry,
// deterministic counter-based initialisation, block dispatch, the loss, dtype/device conversion, FLOPs.
#include "host/model/model.hpp"

#include <ATen/Parallel.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/cross_entropy_loss.h>
#include <ATen/ops/empty.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "host/core/error.hpp"
#include "host/core/text.hpp"
#include "host/model/architectures.hpp"

namespace zhost::model {
namespace {

const std::vector<std::string> kModelTypes = {"mlp", "gpt", "llama", "hf"};

// "[2, 3]" for a shape, for messages.
std::string shape_string(at::IntArrayRef shape) {
  std::vector<std::string> sizes;
  for (const int64_t size : shape) sizes.push_back(std::to_string(size));
  return "[" + text::join(sizes) + "]";
}

void require_positive(const char* field, int64_t value) {
  if (value < 1) fail_usage("model.{} must be at least 1 (got {})", field, value);
}

// splitmix64's output function applied to state x + golden ratio: a counter-based generator where output
// i of a stream with key k is splitmix64(k + i * golden).
constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;
uint64_t splitmix64(uint64_t x) {
  x += kGolden;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Writes std * N(0, 1) samples for elements [first, first + count) of the stream `key` into out[0..count).
void fill_normal(uint64_t key, int64_t first, int64_t count, double std, float* out) {
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  constexpr double kInv2Pow32 = 1.0 / 4294967296.0;
  at::parallel_for(0, count, 1 << 15, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const uint64_t bits = splitmix64(key + static_cast<uint64_t>(first + i) * kGolden);
      const double u1 = (static_cast<double>(bits >> 32) + 1.0) * kInv2Pow32;    // (0, 1]
      const double u2 = static_cast<double>(bits & 0xFFFFFFFFull) * kInv2Pow32;  // [0, 1)
      out[i] = static_cast<float>(std * std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2));
    }
  });
}

}  // namespace

int64_t llama_default_ffn_width(int64_t width) {
  const int64_t hidden = 8 * width / 3;  // 2/3 of 4 * width
  return (hidden + 31) / 32 * 32;
}

ModelSpec resolve_spec(const ModelSpec& spec) {
  ModelSpec resolved = spec;
  const bool known = std::find(kModelTypes.begin(), kModelTypes.end(), spec.type) != kModelTypes.end();
  if (!known) {
    fail_usage("model.type '{}' is unknown{}; use one of {}", spec.type, text::did_you_mean(spec.type, kModelTypes),
               text::join(kModelTypes));
  }
  if (spec.type == "hf") return resolve_hf_spec(spec);
  require_positive("layers", spec.layers);
  require_positive("width", spec.width);
  require_positive("vocab", spec.vocab);
  require_positive("seq_len", spec.seq_len);
  if (!(spec.init_std > 0.0) || !std::isfinite(spec.init_std)) {
    fail_usage("model.init_std must be a positive number (got {})", spec.init_std);
  }
  if (spec.ffn_width < 0)
    fail_usage("model.ffn_width must be at least 1, or 0 for the default (got {})", spec.ffn_width);
  if (spec.ffn_width == 0)
    resolved.ffn_width = spec.type == "llama" ? llama_default_ffn_width(spec.width) : 4 * spec.width;
  if (spec.type == "mlp") return resolved;  // no attention: heads and kv_heads are unused

  require_positive("heads", spec.heads);
  if (spec.width % spec.heads != 0) {
    fail_usage("model.width {} is not divisible by model.heads {}; pick heads that divide the width", spec.width,
               spec.heads);
  }
  if (spec.kv_heads < 0) fail_usage("model.kv_heads must be at least 1, or 0 for heads (got {})", spec.kv_heads);
  resolved.kv_heads = spec.kv_heads == 0 ? spec.heads : spec.kv_heads;
  if (spec.type == "gpt" && resolved.kv_heads != spec.heads) {
    fail_usage(
        "model.kv_heads {} differs from model.heads {}, but gpt has no grouped-query attention; leave "
        "kv_heads at 0 or use model.type = \"llama\"",
        spec.kv_heads, spec.heads);
  }
  if (spec.heads % resolved.kv_heads != 0) {
    fail_usage("model.heads {} is not a multiple of model.kv_heads {}; pick kv_heads that divide heads", spec.heads,
               resolved.kv_heads);
  }
  if (spec.type == "llama" && (spec.width / spec.heads) % 2 != 0) {
    fail_usage(
        "llama's rotary embedding needs an even head dimension, but model.width / model.heads = {}; "
        "change width or heads",
        spec.width / spec.heads);
  }
  return resolved;
}

std::unique_ptr<Model> make_model(const ModelSpec& spec, const Placement& placement) {
  const ModelSpec resolved = resolve_spec(spec);
  if (resolved.type == "mlp") return make_mlp(resolved, placement);
  if (resolved.type == "gpt") return make_gpt(resolved, placement);
  if (resolved.type == "hf") return make_hf(resolved, placement);
  return make_llama(resolved, placement);
}

std::unique_ptr<Model> make_model(const ModelSpec& spec, at::Device device, at::ScalarType dtype) {
  return make_model(spec, Placement{device, dtype, true});
}

Model::Model(const ModelSpec& resolved_spec, const Placement& placement)
    : spec_(resolved_spec),
      device_(placement.device),
      dtype_(placement.dtype),
      materialize_(placement.materialize),
      used_by_block_(num_blocks()) {}

Model::~Model() = default;

at::Tensor Model::add_parameter(const std::string& name, int block, std::vector<int64_t> shape, ParamInit init) {
  ZHOST_ASSERT(block >= 0 && static_cast<size_t>(block) < num_blocks());
  const size_t index = params_.size();
  inits_.push_back(init);
  const at::TensorOptions options = at::TensorOptions().device(device_).dtype(dtype_);
  if (materialize_) {
    params_.push_back(ParamEntry{name, at::empty(shape, options), block});
    init_parameter(index, params_.back().tensor);
  } else {  // the shape without storage: metadata only, nothing allocated
    params_.push_back(ParamEntry{name, at::empty({0}, options), block});
    params_.back().tensor.unsafeGetTensorImpl()->set_sizes_contiguous(shape);
  }
  at::Tensor& tensor = params_.back().tensor;
  tensor.set_requires_grad(true);
  used_by_block_[static_cast<size_t>(block)].push_back(index);
  return tensor;
}

void Model::add_use(size_t block, size_t param_index) {
  ZHOST_ASSERT(block < num_blocks() && param_index < params_.size());
  std::vector<size_t>& used = used_by_block_[block];
  used.insert(std::upper_bound(used.begin(), used.end(), param_index), param_index);
}

void Model::init_parameter(size_t param_index, at::Tensor& full) const {
  ZHOST_ASSERT(param_index < params_.size());
  if (full.sizes() != params_[param_index].tensor.sizes() || !full.is_contiguous()) {
    fail("init_parameter: parameter {} ('{}') has shape {}, but the tensor to fill has shape {}{}", param_index,
         params_[param_index].name, shape_string(params_[param_index].tensor.sizes()), shape_string(full.sizes()),
         full.is_contiguous() ? "" : " and is not contiguous");
  }
  at::Tensor flat = full.view({-1});  // a view: fills `full` (parameters are contiguous)
  init_parameter_shard(param_index, 0, flat);
}

void Model::init_parameter_shard(size_t param_index, int64_t flat_offset, at::Tensor& shard) const {
  ZHOST_ASSERT(param_index < params_.size() && flat_offset >= 0 && shard.is_contiguous());
  const at::NoGradGuard no_grad;  // the target may be the parameter itself (a leaf that requires grad)
  const ParamInit& init = inits_[param_index];
  const int64_t numel = params_[param_index].tensor.numel();
  const int64_t valid = std::max<int64_t>(0, std::min(shard.numel(), numel - flat_offset));
  at::Tensor flat = shard.view({-1});
  if (valid < shard.numel()) flat.narrow(0, valid, shard.numel() - valid).zero_();  // shard padding
  if (valid == 0) return;
  at::Tensor target = flat.narrow(0, 0, valid);
  switch (init.kind) {
    case Init::kZeros:
      target.zero_();
      return;
    case Init::kOnes:
      target.fill_(1.0);
      return;
    case Init::kLoaded:
      load_parameter_shard(param_index, flat_offset, target);
      return;
    case Init::kNormal: {
      const uint64_t key = splitmix64(spec_.seed ^ splitmix64(static_cast<uint64_t>(param_index)));
      at::Tensor values = at::empty({valid}, at::TensorOptions().dtype(at::kFloat));
      fill_normal(key, flat_offset, valid, init.std, values.data_ptr<float>());
      target.copy_(values);
      return;
    }
  }
}

void Model::load_parameter_shard(size_t param_index, int64_t, at::Tensor&) const {
  fail("parameter {} ('{}') is marked as loaded, but this model loads nothing", param_index, params_[param_index].name);
}

at::Tensor Model::forward_block(size_t block, const at::Tensor& x) const {
  if (block >= num_blocks()) fail("forward_block: block {} does not exist (the model has {})", block, num_blocks());
  if (block == 0) {
    if (x.dim() != 2 || x.scalar_type() != at::kLong || x.size(1) > spec_.seq_len) {
      fail("the embedding block takes tokens [B, T] int64 with T <= seq_len {}; got {} {}", spec_.seq_len,
           shape_string(x.sizes()), c10::toString(x.scalar_type()));
    }
  } else if (x.dim() != 3 || x.size(2) != spec_.width) {
    fail("block {} takes activations [B, T, {}]; got {}", block, spec_.width, shape_string(x.sizes()));
  }
  return run_block(block, x);
}

at::Tensor Model::forward(const at::Tensor& tokens) const {
  at::Tensor x = tokens;
  for (size_t block = 0; block < num_blocks(); ++block) x = forward_block(block, x);
  return x;
}

at::Tensor Model::loss(const at::Tensor& logits, const at::Tensor& targets) const {
  // logits: [B, T, V] -> [B*T, V]; targets: [B, T] -> [B*T]
  return at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}).to(at::kFloat), targets.reshape({-1}));
}

int64_t Model::num_parameters() const {
  int64_t total = 0;
  for (const ParamEntry& param : params_) total += param.tensor.numel();
  return total;
}

double Model::flops_per_token() const {
  double macs = 0;  // one formula: the blocks' forward MACs (forward_macs_per_token), x 6 for forward and backward
  for (size_t b = 0; b < num_blocks(); ++b) macs += forward_macs_per_token(b);
  return 6.0 * macs;
}

double Model::forward_macs_per_token(size_t block, int64_t kept) const {
  if (block == 0) return 0;  // block 0 looks its tables up by token id: no matmul
  double macs = 0;
  for (size_t id : used_by_block_[block])
    if (!inits_[id].lookup_only) macs += static_cast<double>(params_[id].tensor.numel());
  const bool layer = block + 1 < num_blocks();
  const int64_t tokens = layer && kept > 0 && kept < spec_.seq_len ? kept : spec_.seq_len;
  if (layer && has_attention()) macs += 2.0 * static_cast<double>(spec_.width) * static_cast<double>(tokens);
  return macs * static_cast<double>(tokens) / static_cast<double>(spec_.seq_len);
}

void Model::to(at::ScalarType dtype) {
  const at::NoGradGuard no_grad;
  for (ParamEntry& param : params_) {
    param.tensor.set_data(param.tensor.detach().to(dtype));
    param.tensor.mutable_grad() = at::Tensor();
  }
  dtype_ = dtype;
}

void Model::to(at::Device device) {
  const at::NoGradGuard no_grad;
  for (ParamEntry& param : params_) {
    param.tensor.set_data(param.tensor.detach().to(device));
    param.tensor.mutable_grad() = at::Tensor();
  }
  device_ = device;
}

}  // namespace zhost::model
