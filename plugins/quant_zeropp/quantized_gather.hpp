// plugins/quant_zeropp/quantized_gather.hpp: qwZ, the parameter all-gather with int8 payloads. Each rank
// packs its shard (packed_chunks.hpp: int8 blocks and their fp32 scales, scales gathered with the data),
// the packed shards are all-gathered as bytes, and every rank dequantizes all of them, its own included, so
// that every rank computes with the same weights. fp32, bf16 and fp16 parameters are each read and written
// as their own type.
//
// Per rank and gather of a unit of U bytes of parameters over w ranks, the wire carries (w-1)/w of
//   U/4 (fp32) or U/2 (16-bit), plus 4 bytes per block of scales,
// against (w-1)/w of U for the plain gather.
#pragma once

#include "zhost/collective.h"
#include "zhost/cpp/plugin.hpp"
#include "zhost/kit/zeropp_quant.hpp"

namespace zhost::zeropp {

class QuantizedGather {
 public:
  QuantizedGather(const sdk::Host& host, BlockFormat format) : host_(host), format_(format) {}
  // Serves an equal-split all-gather in a quantizable type, send and recv on one device (Note [ZeRO++ on the
  // collective's device]); args.recv holds the result.
  void serve(zhost_collective_args& args) const;

 private:
  const sdk::Host& host_;
  BlockFormat format_;
};

}  // namespace zhost::zeropp
