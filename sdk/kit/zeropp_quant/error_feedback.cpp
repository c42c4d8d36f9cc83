// sdk/kit/zeropp_quant/error_feedback.cpp: quantization with error feedback, Note [LoCo error feedback]
// (zhost/kit/zeropp_quant.hpp): the compensation and the error update in plain C++ around the SIMD quantize
// and dequantize kernels, a few blocks at a time through small fp32 scratch buffers.
#include <algorithm>
#include <cstring>
#include <vector>

#include "../simd/ops_scalar.hpp"
#include "../src/kit_error.hpp"
#include "zhost/kit/zeropp_quant.hpp"

namespace zhost::zeropp {
namespace {

constexpr int64_t kScratchElements = 1 << 16;  // elements per pass (rounded up to whole blocks)

float element(const void* src, Dtype type, int64_t i) {
  switch (type) {
    case Dtype::kF32:
      return static_cast<const float*>(src)[i];
    case Dtype::kBf16:
      return simd::float_from_bf16(static_cast<const uint16_t*>(src)[i]);
    case Dtype::kF16:
      return simd::float_from_f16(static_cast<const uint16_t*>(src)[i]);
  }
  return 0.0f;
}

}  // namespace

void quantize_compensated(const void* src, Dtype src_type, int64_t n, const BlockFormat& format, float beta,
                          float* error, void* data, float* scales, const QuantOptions& options) {
  check_format(format);
  if (!(beta >= 0.0f && beta < 1.0f)) {
    kit::detail::fail(ZHOST_ERR_INVALID_ARGUMENT, "zeropp error feedback: beta {} is outside [0, 1)", beta);
  }
  if (n > 0 && (src == nullptr || error == nullptr || data == nullptr || scales == nullptr)) {
    kit::detail::fail(ZHOST_ERR_INVALID_ARGUMENT,
                      "zeropp error feedback: null source, error, data or scales buffer for {} elements", n);
  }
  const int64_t block = format.block_size;
  const int64_t pass = std::max<int64_t>(1, kScratchElements / block) * block;
  std::vector<float> compensated(static_cast<size_t>(std::min(n, pass)));
  std::vector<float> sent(compensated.size());
  const float keep = beta, take = 1.0f - beta;
  auto* out = static_cast<uint8_t*>(data);
  for (int64_t begin = 0; begin < n; begin += pass) {
    const int64_t m = std::min(pass, n - begin);
    for (int64_t i = 0; i < m; ++i) compensated[i] = element(src, src_type, begin + i) + error[begin + i];
    // Whole blocks from `begin`, so the int4 data starts on a byte (blocks are even there).
    uint8_t* part_data = out + data_bytes(begin, format);
    float* part_scales = scales + begin / block;
    quantize(compensated.data(), Dtype::kF32, m, format, part_data, part_scales, options);
    dequantize(part_data, part_scales, m, format, sent.data(), Dtype::kF32, options);
    float* e = error + begin;
    for (int64_t b = 0; b < m; b += block) {
      const int64_t end = std::min(m, b + block);
      if (__builtin_isnan(part_scales[b / block])) {
        std::fill(e + b, e + end, 0.0f);
        continue;
      }
      for (int64_t i = b; i < end; ++i) {
        const float lost = compensated[i] - sent[i];
        const float kept = keep * e[i];
        const float added = take * lost;
        e[i] = kept + added;
      }
    }
  }
}

}  // namespace zhost::zeropp
