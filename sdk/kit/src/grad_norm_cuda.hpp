// sdk/kit/src/grad_norm_cuda.hpp: internal to zhost_kit (built with ZHOST_WITH_CUDA). The two passes of Note
// [Exact gradient norm] (zhost/kit/grad_numerics.hpp) over CUDA device memory, so that a GPU's gradients
// are not copied to the host twice per step. They give the host loops' integers bit for bit
// (grad_norm_kernels.hpp): nothing in them rounds, so the order in which threads add does not matter.
// Plain CUDA without LibTorch; each call enqueues one kernel on `stream` (a cudaStream_t) and returns; a
// failed launch throws sdk::PluginError (ZHOST_ERR_INTERNAL) with CUDA's message.
#pragma once

#include <cstdint>

namespace zhost::kit::detail::cuda {

enum class NormDtype { kFloat, kBFloat16, kHalf };  // the element types of a gradient

// *largest = max(*largest, bits of |x[i]| for all i) - the host's max_abs_bits; `largest` is device memory.
void max_abs_bits(const void* x, NormDtype type, int64_t n, uint32_t* largest, void* stream);

// Adds each x[i]'s floor(x[i]^2 * scale) (below 2^80) into three device counters, as its bits from 54 up,
// from 27 to 53 and below 27: floor(v) = parts[0] 2^54 + parts[1] 2^27 + parts[2]. Each part is below 2^27,
// so the uint64 counters are exact for up to 2^37 elements.
void add_square_sum_parts(const void* x, NormDtype type, int64_t n, double scale, uint64_t* parts, void* stream);

}  // namespace zhost::kit::detail::cuda
