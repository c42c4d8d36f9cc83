// host/model/model.hpp: zhost's built-in models (mlp, gpt, llama) and Hugging Face models (type "hf":
// GPT-2, Llama, Mistral from config.json + safetensors, docs/models.md) as explicit sequences of blocks,
// the parameter registry the engine and the partition plugins rely on, and deterministic initialisation.
//
// The block contract (what the engine and ZeRO plugins rely on):
//   block 0          embedding:   tokens [B, T] int64 -> x [B, T, C]
//   blocks 1..N      transformer (gpt, llama) or feed-forward (mlp) layers: x [B, T, C] -> x [B, T, C]
//   block N+1        head: final norm (gpt, llama) + projection: x [B, T, C] -> logits [B, T, V];
//                    loss(logits, targets) then gives the mean next-token cross-entropy.
// forward_block(b, x) is a pure function of block b's parameters and x (no hidden state, no RNG), so the
// engine may recompute any block for activation checkpointing. The engine runs blocks one by one; the
// calls are the hook points where partitioners gather and release a block's parameters.
//
// The parameter registry: parameters() lists every trainable parameter once, in a fixed order that
// depends only on the spec (identical on every rank): block 0's, then each layer's, then the head's.
// Names follow "embed.tokens.weight", "blocks.<layer>.attn.qkv.weight", "head.norm.weight"; <layer> counts
// transformer layers from 0, so layer i is block i+1. Hugging Face models keep HF's names and layouts
// ("model.layers.0.self_attn.q_proj.weight"; GPT-2's Conv1D weights stay [in, out]). Each entry's tensor shares its
// TensorImpl with the model: to swap a parameter's storage (ZeRO stage 3) call tensor.set_data(...), never reassign it.
//
// Tied weights: gpt's head projection is the token embedding. It is ONE parameter
// ("embed.tokens.weight"), owned by block 0 and also used by the head block N+1; partitioners must keep
// it live for both. params_used_by_block() lists, for each block, every parameter id it reads.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zhost::model {

// The attention kernel of gpt, llama and hf models (Note [Attention kernels] in layers.cpp).
enum class Attention { kSdpa, kEager };

struct ModelSpec {
  std::string type = "gpt";  // mlp | gpt | llama | hf
  std::string path;          // hf: the model folder (config.json + safetensors); the dimensions below then
                             // come from config.json (resolve_spec fills them) and init_std is unused
  int64_t layers = 2;        // N: transformer (or mlp) blocks
  int64_t heads = 4;         // query heads (gpt, llama); width % heads == 0
  int64_t kv_heads = 0;      // llama key/value heads, 0 = heads; heads % kv_heads == 0 (gpt: must be 0 or heads)
  int64_t width = 128;       // C
  int64_t ffn_width = 0;     // F, 0 = default: 4*width (gpt, mlp); llama: floor(2/3*4*width) rounded up to
                             // a multiple of 32
  int64_t vocab = 256;       // V
  int64_t seq_len = 64;      // T: the context length (gpt's position table size; the T of flops_per_token)
  double init_std = 0.02;    // std of the normal initialisation
  uint64_t seed = 0;         // the initialisation seed
  Attention attention = Attention::kSdpa;
};

// Checks the spec (UsageError with what to change) and fills its defaults (kv_heads, ffn_width); for
// "hf", reads config.json and fills every dimension from it.
ModelSpec resolve_spec(const ModelSpec& spec);

// model.type = "hf": what the folder's config.json asks of training that zhost's models do not do, one "key value"
// text each: dropout probabilities above 0 (GPT-2's config defaults to 0.1 each; zhost trains without dropout, as
// HF's model in eval mode computes). Empty for other types. The engine warns about them once.
std::vector<std::string> unapplied_hf_settings(const ModelSpec& spec);

// Where and how the parameters are created.
struct Placement {
  at::Device device = at::kCPU;
  at::ScalarType dtype = at::kFloat;
  // false: parameters get their shapes but no storage and no values (ZeRO stage 3's sharded construction,
  // DeepSpeed's zero.Init): a partitioner binds them to storage it materialises and fills its shards with
  // init_parameter_shard. No rank ever holds the whole model.
  bool materialize = true;
};

struct ParamEntry {
  std::string name;   // e.g. "blocks.3.attn.qkv.weight"
  at::Tensor tensor;  // the parameter itself (requires grad); shares its TensorImpl with the model
  int block;          // owning block
};

class Model {
 public:
  virtual ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelSpec& spec() const { return spec_; }  // resolved: defaults filled in
  size_t num_blocks() const { return static_cast<size_t>(spec_.layers) + 2; }

  // Runs block b (see the contract above). Block 0 takes tokens [B, T] int64 with T <= seq_len.
  at::Tensor forward_block(size_t block, const at::Tensor& x) const;
  // Runs all blocks: tokens [B, T] int64 -> logits [B, T, V].
  at::Tensor forward(const at::Tensor& tokens) const;
  // Mean next-token cross-entropy, computed in fp32: logits [B, T, V], targets [B, T] int64 -> scalar.
  at::Tensor loss(const at::Tensor& logits, const at::Tensor& targets) const;

  // Whether a transformer block sees its tokens' positions only through what block 0 added to them (learned absolute
  // positions: gpt, GPT-2; mlp has none), so that it may run on a subset of the sequence, causal among the tokens
  // kept (random-LTD, Note [Random-LTD] in host/engine/random_ltd.hpp). false for rotary positions (llama, HF Llama
  // and Mistral), which a block computes from where a token sits in its input.
  virtual bool positions_from_embedding() const = 0;

  const std::vector<ParamEntry>& parameters() const { return params_; }
  // For each block, the ids (indices into parameters()) of every parameter it reads, ascending; includes
  // parameters owned by another block (gpt's head lists the tied embedding, id 0).
  const std::vector<std::vector<size_t>>& params_used_by_block() const { return used_by_block_; }
  int64_t num_parameters() const;  // sum of numel over parameters(); a tied weight counts once

  // Training FLOPs per token (forward + backward), PaLM appendix B / nanoGPT / llm.c estimate:
  //   6 * N_matmul + 12 * L * H * Q * T
  // N_matmul: num_parameters() minus lookup-only tables (gpt's position table; llama's and mlp's untied
  // token embedding), i.e. the weights that take part in matmuls (norm weights and biases included, they
  // are negligible); L = layers, H * Q = heads * head_dim = width, T = seq_len (the attention term counts
  // the full T x T score matrix, as PaLM does; 0 for mlp).
  double flops_per_token() const;
  // Forward multiply-accumulates per token of block b (the flops profiler's MACs): the elements of the parameters
  // block b reads in matmuls (not block 0's lookups, nor lookup-only tables), plus 2 * width * seq_len for a
  // transformer layer's attention (scores and weighted sum). 6 x their sum over the blocks is flops_per_token().
  // With `kept` in (0, seq_len): per token of the sequence when the block runs on `kept` of them (random-LTD,
  // Note [Random-LTD]): kept / seq_len of the matmuls, and attention over `kept` tokens.
  double forward_macs_per_token(size_t block, int64_t kept = 0) const;

  // Fills `full` (any dtype, any device, the parameter's full shape) with parameter param_index's initial
  // value. A Hugging Face model's come from its safetensors (read from the memory map: only the bytes of
  // the range asked for are touched). The built-in models' are a function of (seed, param_index) alone: the same bits
  // on every rank and process. Values come from a counter-based generator (splitmix64 of (seed, param_index, element
  // index) -> Box-Muller), so each element is computed independently of the others, in fp32 on the CPU, then copied
  // into `full`.
  void init_parameter(size_t param_index, at::Tensor& full) const;
  // Stage 3's sharded variant: fills `shard` (contiguous, any dtype/device) with elements
  // [flat_offset, flat_offset + shard.numel()) of the flattened initial value; elements past the end of
  // the parameter (shard padding) are zero. Exact, O(shard) work: the full tensor is never built.
  void init_parameter_shard(size_t param_index, int64_t flat_offset, at::Tensor& shard) const;

  // Converts every parameter in place (set_data: handles from parameters() stay valid; gradients are
  // dropped). Compute then runs in that dtype; softmax, norms and the loss still accumulate in fp32.
  void to(at::ScalarType dtype);
  void to(at::Device device);

 protected:
  enum class Init { kNormal, kZeros, kOnes, kLoaded };  // kLoaded: load_parameter_shard gives the values
  struct ParamInit {
    Init kind;
    double std;        // kNormal only
    bool lookup_only;  // an embedding table read by index only (excluded from flops_per_token's N)
  };

  Model(const ModelSpec& resolved_spec, const Placement& placement);
  // Registers and initialises a parameter owned by `block`; returns its handle.
  at::Tensor add_parameter(const std::string& name, int block, std::vector<int64_t> shape, ParamInit init);
  // Records that `block` also reads parameter `param_index` (a tied weight).
  void add_use(size_t block, size_t param_index);
  // forward_block after the block index and the input have been checked.
  virtual at::Tensor run_block(size_t block, const at::Tensor& x) const = 0;
  virtual bool has_attention() const = 0;
  // Init::kLoaded parameters: writes elements [flat_offset, flat_offset + target.numel()) (all inside the
  // parameter) of parameter param_index's initial value into `target` (contiguous, any dtype and device).
  virtual void load_parameter_shard(size_t param_index, int64_t flat_offset, at::Tensor& target) const;

 private:
  ModelSpec spec_;
  at::Device device_;
  at::ScalarType dtype_;
  bool materialize_;
  std::vector<ParamEntry> params_;
  std::vector<ParamInit> inits_;
  std::vector<std::vector<size_t>> used_by_block_;
};

// Builds the model the spec describes (checked with resolve_spec), its parameters initialised from
// spec.seed, on `device` in `dtype`.
std::unique_ptr<Model> make_model(const ModelSpec& spec, const Placement& placement);
std::unique_ptr<Model> make_model(const ModelSpec& spec, at::Device device = at::kCPU,
                                  at::ScalarType dtype = at::kFloat);

// Writes a Hugging Face model folder `out_dir` for an "hf" model: model.safetensors holding `values` (each
// parameter's full value, written as F32) under `names` (parameters()' names: HF's), and spec.path's
// config.json (torch_dtype set to "float32") and tokenizer files. Loading it back gives the same bits.
void export_hf(const ModelSpec& spec, const std::vector<std::string>& names, const std::vector<at::Tensor>& values,
               const std::string& out_dir);

// Copies a Hugging Face folder's tokenizer and generation files (those of them that exist) from `from` into
// `out_dir`; returns how many it copied.
int copy_hf_side_files(const std::string& from, const std::string& out_dir);

// Default llama feed-forward width for `width`: floor(8 * width / 3) rounded up to a multiple of 32.
int64_t llama_default_ffn_width(int64_t width);

}  // namespace zhost::model
