// tests/zeropp/packed_chunks_test.cpp: quant_zeropp's chunk packing (plugins/quant_zeropp/packed_chunks.hpp),
// compiled into the test: how a chunk is cut at the tensors ZHOST_EXT_SEGMENTS names (Note [Blocks within a
// tensor]), the stride of a collective's chunks, refusal of malformed segments, that a block never takes
// its scale from a neighbouring tensor, and which memory the device operations serve.
#include "plugins/quant_zeropp/packed_chunks.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "zhost/cpp/error.hpp"

namespace zhost::zeropp {
namespace {

std::vector<int64_t> lengths(const int64_t* starts, size_t count, int64_t begin, int64_t end) {
  return ChunkPieces(starts, count, begin, end).lengths();
}

TEST(PackedChunks, ChunksAreCutWhereTensorsStart) {
  const int64_t starts[] = {0, 5, 12};  // tensors [0, 5), [5, 12), [12, end)
  EXPECT_EQ(lengths(starts, 3, 0, 8), (std::vector<int64_t>{5, 3}));
  EXPECT_EQ(lengths(starts, 3, 3, 10), (std::vector<int64_t>{2, 5}));
  EXPECT_EQ(lengths(starts, 3, 5, 12), (std::vector<int64_t>{7}));
  EXPECT_EQ(lengths(starts, 3, 4, 20), (std::vector<int64_t>{1, 7, 8}));
  EXPECT_EQ(lengths(starts, 3, 12, 20), (std::vector<int64_t>{8}));
  EXPECT_EQ(ChunkPieces(9).lengths(), (std::vector<int64_t>{9}));
}

// Two ranks' chunks of one buffer: the stride is the larger packed chunk, the segments must be 0 then
// increasing starts below the buffer's end.
TEST(PackedChunks, PlanUsesTheSegmentsAndTheLargestChunkAsStride) {
  const BlockFormat format{Bits::kInt8, 4};
  const int64_t starts[] = {0, 3};
  zhost_segments_ext segments{{sizeof(zhost_segments_ext), ZHOST_EXT_SEGMENTS, nullptr}, starts, 2};
  zhost_collective_args args{};
  args.ext = &segments.header;
  const ChunkPlan plan = plan_chunks(args, 2, 6, format);  // chunks [0, 6): pieces 3 + 3; [6, 12): 6
  ASSERT_EQ(plan.chunks.size(), 2u);
  EXPECT_EQ(plan.chunks[0].lengths(), (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(plan.chunks[1].lengths(), (std::vector<int64_t>{6}));
  EXPECT_EQ(packed_bytes(plan.chunks[0], format), 4 * 2 + 6 + 2);  // 2 scales, 6 bytes, 2 of padding
  EXPECT_EQ(packed_bytes(plan.chunks[1], format), 4 * 2 + 6 + 2);
  args.ext = nullptr;
  EXPECT_EQ(plan_chunks(args, 2, 6, format).chunks[0].lengths(), (std::vector<int64_t>{6}));

  const int64_t bad[][2] = {{1, 3}, {0, 0}, {0, 12}};
  for (const auto& b : bad) {
    zhost_segments_ext wrong{{sizeof(zhost_segments_ext), ZHOST_EXT_SEGMENTS, nullptr}, b, 2};
    args.ext = &wrong.header;
    try {
      plan_chunks(args, 2, 6, format);
      ADD_FAILURE() << "segments " << b[0] << ", " << b[1] << " accepted";
    } catch (const sdk::PluginError& e) {
      EXPECT_EQ(e.code(), ZHOST_ERR_INVALID_ARGUMENT);
    }
  }
}

// A norm vector of values near 1 and a weight matrix of values near 0.02 in one chunk, int8 blocks of 4096:
// cut at the tensors, each keeps its own scale and the matrix's values come back within its own half step;
// as one piece the matrix would get the norm's scale (a step of 1/127).
TEST(PackedChunks, BlocksNeverTakeTheirScaleFromANeighbouringTensor) {
  const BlockFormat format{Bits::kInt8, 4096};
  std::vector<float> values(64 + 2000);
  for (int i = 0; i < 64; ++i) values[i] = 1.0f + 0.001f * static_cast<float>(i);
  float matrix_max = 0;
  for (size_t i = 64; i < values.size(); ++i) {
    values[i] = 0.02f * std::sin(static_cast<float>(i));
    matrix_max = std::max(matrix_max, std::fabs(values[i]));
  }
  const int64_t n = static_cast<int64_t>(values.size());
  const int64_t starts[] = {0, 64};
  for (const bool cut : {true, false}) {
    const ChunkPieces pieces = cut ? ChunkPieces(starts, 2, 0, n) : ChunkPieces(n);
    const int64_t stride = packed_bytes(pieces, format) + 8;  // a larger neighbour's stride: zeros after
    const DeviceOps& ops = DeviceOps::of(DLDevice{kDLCPU, 0});
    ByteBuffer packed(ops, stride);
    pack(ops, values.data(), Dtype::kF32, pieces, format, packed.data(), stride);
    EXPECT_EQ(packed.data()[stride - 1], 0);
    std::vector<float> back(values.size());
    unpack(ops, packed.data(), pieces, format, back.data(), Dtype::kF32);
    float worst = 0;
    for (size_t i = 64; i < values.size(); ++i) worst = std::max(worst, std::fabs(back[i] - values[i]));
    if (cut)
      EXPECT_LE(worst, matrix_max / 254 * 1.001f);
    else
      EXPECT_GT(worst, 10 * matrix_max / 254) << "one piece: the matrix shares the norm's scale";
  }
}

// Note [ZeRO++ on the collective's device]: host memory (pageable or pinned) is served by the CPU kernels; a
// device this build cannot serve is refused with an error that says what to do, never treated as host memory.
TEST(DeviceOps, HostMemoryServedAndOtherDevicesRefusedByName) {
  const DeviceOps& pageable = DeviceOps::of(DLDevice{kDLCPU, 0});
  EXPECT_EQ(&DeviceOps::of(DLDevice{kDLCUDAHost, 0}), &pageable);
  EXPECT_EQ(pageable.device().device_type, kDLCPU);
  EXPECT_TRUE(pageable.options().device().is_cpu());
  auto refusal = [](DLDevice device) -> std::string {
    try {
      DeviceOps::of(device);
    } catch (const sdk::PluginError& e) {
      EXPECT_EQ(e.code(), ZHOST_ERR_UNSUPPORTED);
      return e.what();
    }
    return "not refused";
  };
  EXPECT_NE(refusal(DLDevice{kDLVulkan, 0}).find("device type 7"), std::string::npos)
      << refusal(DLDevice{kDLVulkan, 0});
#ifndef ZHOST_WITH_CUDA
  EXPECT_NE(refusal(DLDevice{kDLCUDA, 1}).find("ZHOST_WITH_CUDA"), std::string::npos) << refusal(DLDevice{kDLCUDA, 1});
#endif
}

}  // namespace
}  // namespace zhost::zeropp
