// plugins/quant_zeropp/error_feedback.hpp: LoCo (zero.zeropp_loco_param), the error qgZ's quantization left in
// each gradient buffer, kept until that buffer's next reduction and sent with it (Note [LoCo error feedback] in
// zhost/kit/zeropp_quant.hpp). A reduction has one error buffer per hop (Note [qgZ's two hops]): hop 1 over
// the rank's whole send buffer, hop 2 over its node sums. A buffer is named by the block the reduce-scatter
// is for (args.block), the hop and its element count. Block -1 (stage 3's persistent unit) is a name like
// the others: two buffers of one block and size would share an error, so a partition names its buffers apart.
//
// Between reductions an error buffer is kept as int8 blocks of 512 with fp32 scales, as DeepSpeed keeps it:
// 1 + 4/512 bytes per element, so hop 1 holds about 1 byte per parameter of the model on every rank (not
// 1/N of it: each rank's send buffer is the whole unit's gradient), on the device of the collectives
// (Note [ZeRO++ on the collective's device]). memory_bytes() reports it. A buffer's
// error restarts from zero after reset_T of its reductions (DeepSpeed counts one counter over all buffers
// instead). The errors are not saved in checkpoints: a resumed job starts them from zero.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

#include "plugins/quant_zeropp/packed_chunks.hpp"
#include "zhost/cpp/plugin.hpp"

namespace zhost::zeropp {

struct LocoOptions {
  float beta = 0.8f;           // zero.zeropp_loco_param.err_beta
  int64_t reset_after = 1024;  // zero.zeropp_loco_param.reset_T
};

class ErrorFeedback {
 public:
  ErrorFeedback(const sdk::Host& host, LocoOptions options) : host_(host), options_(options) {}
  const LocoOptions& options() const { return options_; }
  float beta() const { return options_.beta; }
  // The fp32 error of (block, hop)'s buffer of n elements for this reduction, in the memory of `ops`: zeros
  // the first time and after reset_T reductions of it. The caller updates it (quantize_compensated) and hands
  // it back with store() before the next load().
  float* load(const DeviceOps& ops, int32_t block, int hop, int64_t n);
  // Keeps the updated error of the buffer load() last gave out.
  void store();
  uint64_t memory_bytes() const { return bytes_; }
  // The fp32 copy of the error in use, as large as the largest buffer (staging, not model state).
  uint64_t scratch_bytes() const { return open_.defined() ? static_cast<uint64_t>(open_.nbytes()) : 0; }

 private:
  using Key = std::tuple<int32_t, int, int64_t>;  // block, hop, elements
  struct Kept {
    std::unique_ptr<ByteBuffer> packed;  // packed_chunks.hpp layout, int8 blocks of 512
    int64_t reductions = 0;
  };
  const sdk::Host& host_;
  LocoOptions options_;
  std::map<Key, Kept> kept_;
  at::Tensor open_;                      // fp32: the error load() gave out, at its start
  const DeviceOps* open_ops_ = nullptr;  // where open_ lives
  Kept* open_kept_ = nullptr;
  int64_t open_n_ = 0;
  uint64_t bytes_ = 0;
};

}  // namespace zhost::zeropp
