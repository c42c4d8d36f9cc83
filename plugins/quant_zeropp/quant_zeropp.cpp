// plugins/quant_zeropp/quant_zeropp.cpp: the ZeRO++ collective transform: descriptor, keys, and which
// collectives it serves (docs/zeropp.md). qwZ (zero.zero_quantized_weights) serves stage 3's parameter
// gathers (quantized_gather.hpp), hpZ (zero.zero_hpz_partition_size) keeps a copy of them within the node for
// the re-gathers of the same micro-batch (secondary_copies.hpp), qgZ (zero.zero_quantized_gradients) serves
// the gradient reduce-scatters (quantized_reduce.hpp), with LoCo (zero.zeropp_loco_param) feeding their
// quantization error back (error_feedback.hpp); everything else is left to the host.
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include "plugins/quant_zeropp/device_ops.hpp"
#include "plugins/quant_zeropp/error_feedback.hpp"
#include "plugins/quant_zeropp/node_groups.hpp"
#include "plugins/quant_zeropp/packed_chunks.hpp"
#include "plugins/quant_zeropp/quantized_gather.hpp"
#include "plugins/quant_zeropp/quantized_reduce.hpp"
#include "plugins/quant_zeropp/secondary_copies.hpp"
#include "plugins/quant_zeropp/wire.hpp"
#include "zhost/cpp/collective.hpp"
#include "zhost/kit/format.hpp"

namespace zhost::zeropp {
namespace {

constexpr int64_t kDefaultGradientBlockSize = 512;

BlockFormat weight_format(const sdk::Host& host) {
  return BlockFormat{Bits::kInt8, host.config_int("zero.zeropp.weight_block_size")};
}

BlockFormat gradient_format(const sdk::Host& host) {
  BlockFormat format;
  format.bits = host.config_string("zero.zeropp.gradient_bits") == "int8" ? Bits::kInt8 : Bits::kInt4;
  format.block_size = host.config_int("zero.zeropp.gradient_block_size");
  return format;
}

LocoOptions loco_options(const sdk::Host& host) {
  return LocoOptions{static_cast<float>(host.config_float("zero.zeropp_loco_param.err_beta")),
                     host.config_int("zero.zeropp_loco_param.reset_T")};
}

class QuantZeropp : public sdk::CollectiveHooks {
 public:
  // `host` is the create call's; the pieces keep a reference to this instance's copy.
  explicit QuantZeropp(const sdk::Host& host)
      : host_(host),
        weights_(host.config_bool("zero.zero_quantized_weights")),
        gradients_(host.config_bool("zero.zero_quantized_gradients")),
        gather_(host_, weight_format(host)),
        hpz_(host.config_int("zero.zero_hpz_partition_size") > 1),
        groups_(host_),
        feedback_(host_, loco_options(host)),
        loco_(gradients_ && host.config_bool("zero.zeropp_loco_param.enabled")),
        reduce_(host_, gradient_format(host), groups_, loco_ ? &feedback_ : nullptr),
        copies_(host_, groups_, host.config_int("zero.zero_hpz_partition_size")) {
    check_format(weight_format(host));
    check_format(gradient_format(host));
    std::string on;
    if (weights_)
      on = kit::format("qwZ (parameter gathers as int8, blocks of {})",
                       host.config_int("zero.zeropp.weight_block_size"));
    if (gradients_)
      on += kit::format("{}qgZ (gradient reduce-scatters as {}, blocks of {}, hierarchical)", on.empty() ? "" : ", ",
                        host.config_string("zero.zeropp.gradient_bits"),
                        host.config_int("zero.zeropp.gradient_block_size"));
    if (loco_)
      on += kit::format(", LoCo error feedback (err_beta {}, reset_T {})", feedback_.options().beta,
                        feedback_.options().reset_after);
    if (hpz_)
      on += kit::format("{}hpZ (a secondary copy of the parameters over {} ranks, for the re-gathers)",
                        on.empty() ? "" : ", ", host.config_int("zero.zero_hpz_partition_size"));
    host.info("quant_zeropp: " + (on.empty() ? std::string("nothing asked for") : on));
  }

  bool interpose(zhost_collective_op op, zhost_collective_args& args) {
    std::lock_guard<std::mutex> lock(mutex_);
    const bool parameter_gather = op == ZHOST_OP_ALL_GATHER && (args.intent == ZHOST_INTENT_PARAM_GATHER ||
                                                                args.intent == ZHOST_INTENT_PARAM_REGATHER);
    if ((weights_ || hpz_) && parameter_gather) {
      if (!servable(args, "a parameter gather", args.send_counts != nullptr || args.group != nullptr)) return false;
      if (hpz_ && args.intent == ZHOST_INTENT_PARAM_REGATHER && copies_.serve(args)) return true;
      if (weights_)
        gather_.serve(args);
      else
        wire::all_gather(host_, args, *args.send, *args.recv);
      if (hpz_ && args.block >= 0) copies_.keep(args);
      return true;
    }
    if (gradients_ && op == ZHOST_OP_REDUCE_SCATTER && args.intent == ZHOST_INTENT_GRAD_REDUCE) {
      const bool plain = args.recv_counts != nullptr || args.group != nullptr ||
                         (args.op != ZHOST_REDUCE_SUM && args.op != ZHOST_REDUCE_AVG);
      if (!servable(args, "a gradient reduce-scatter", plain)) return false;
      reduce_.serve(args);
      return true;
    }
    return false;
  }

  // What it keeps between collectives: hpZ's copies, LoCo's errors.
  void memory(zhost_model_state_bytes& out) const {
    out.params = copies_.memory_bytes();
    out.grads = feedback_.memory_bytes();
    out.buffers = feedback_.scratch_bytes();
  }

 private:
  // Whether a collective ZeRO++ is asked to transform can be: refused (an error) for memory this build cannot
  // serve (DeviceOps::of) or send and recv on different devices; declined with one warning per reason for
  // shapes it does not transform.
  bool servable(const zhost_collective_args& args, const char* what, bool other_shape) {
    if (!args.send || !args.recv) return false;
    if (&DeviceOps::of(args.send->device) != &DeviceOps::of(args.recv->device))
      throw sdk::PluginError(ZHOST_ERR_INVALID_ARGUMENT,
                             kit::format("quant_zeropp: {} with send and recv on different devices (a bug in the "
                                         "plugin that started it)",
                                         what));
    std::string reason;
    if (other_shape)
      reason = "uneven parts, a sub-group or a reduction other than sum/average";
    else if (!quantizable(args.send->dtype) || !quantizable(args.recv->dtype) ||
             args.send->dtype.code != args.recv->dtype.code || args.send->dtype.bits != args.recv->dtype.bits)
      reason = "a type other than fp32, bf16 or fp16";
    if (reason.empty()) return true;
    if (warned_.insert(reason).second)
      host_.warn(kit::format("quant_zeropp: {} with {} travels unquantized", what, reason));
    return false;
  }

  const sdk::Host host_;
  bool weights_, gradients_;
  QuantizedGather gather_;
  bool hpz_;
  NodeGroups groups_;
  ErrorFeedback feedback_;
  bool loco_;
  QuantizedReduce reduce_;
  SecondaryCopies copies_;
  std::mutex mutex_;
  std::set<std::string> warned_;
};

const zhost_plugin_api kApi = sdk::collective_api<QuantZeropp>();

const zhost_plugin_descriptor* describe() {
  static sdk::DescriptorBuilder builder("quant_zeropp", "0.1.0", ZHOST_KIND_COLLECTIVE);
  builder
      .summary(
          "ZeRO++: stage 3's parameter gathers as int8 (qwZ), re-gathers within the node (hpZ), gradient "
          "reduce-scatters as int4/int8 (qgZ)")
      .provides({"collective:qwz", "collective:qgz", "collective:hpz", "collective:loco"})
      // The host declares the switches and LoCo's settings: the switches select this plugin.
      .reads_keys({"zero.zero_quantized_weights", "zero.zero_quantized_gradients", "zero.zero_hpz_partition_size",
                   "zero.zeropp_loco_param.enabled", "zero.zeropp_loco_param.err_beta",
                   "zero.zeropp_loco_param.reset_T"})
      .config_int("zero.zeropp.weight_block_size", kDefaultBlockSize,
                  "zhost: elements per quantization block (one fp32 scale each) of qwZ's int8 weights", 1, 1 << 24)
      .config_string("zero.zeropp.gradient_bits", "int4", "zhost: qgZ's gradient payload: \"int4\" or \"int8\"",
                     {"int4", "int8"})
      .config_int("zero.zeropp.gradient_block_size", kDefaultGradientBlockSize,
                  "zhost: elements per quantization block of qgZ's gradients (even)", 2, 1 << 24);
  return builder.build();
}

}  // namespace
}  // namespace zhost::zeropp

ZHOST_PLUGIN_ENTRY(zhost::zeropp::describe(), &zhost::zeropp::kApi)
