// tests/comm/collectives_test.cpp: every collective on 2 and 3 ranks (Gloo), with uneven sizes, checked
// exactly against results computed locally; async overlap and sub-groups; single-rank and argument checks
// in-process.
#include <ATen/ATen.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <numeric>

#include "host/core/error.hpp"
#include "tests/comm/multi_rank.hpp"

namespace zhost::comm::testing {
namespace {

// Small integers (exact in float), different on every rank and not monotonic, so max/min are meaningful.
at::Tensor rank_data(int rank, int64_t numel, at::ScalarType dtype = at::kFloat) {
  return (at::arange(numel, at::kLong).mul(7).add(5 * rank).remainder(11).sub(3).add(rank)).to(dtype);
}

at::Tensor reduce_over_ranks(int world_size, int64_t numel, ReduceOp op, at::ScalarType dtype = at::kFloat) {
  at::Tensor result = rank_data(0, numel, dtype);
  for (int rank = 1; rank < world_size; ++rank) {
    const at::Tensor data = rank_data(rank, numel, dtype);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        result = result + data;
        break;
      case ReduceOp::kMax:
        result = at::maximum(result, data);
        break;
      case ReduceOp::kMin:
        result = at::minimum(result, data);
        break;
    }
  }
  return op == ReduceOp::kAvg ? result / world_size : result;
}

void check_equal(const at::Tensor& actual, const at::Tensor& expected, const std::string& what) {
  SCENARIO_CHECK(
      actual.sizes() == expected.sizes() && at::equal(actual, expected), "{}: got {} expected {}", what,
      fmt::to_string(fmt::join(actual.data_ptr<float>(), actual.data_ptr<float>() + actual.numel(), ",")),
      fmt::to_string(fmt::join(expected.data_ptr<float>(), expected.data_ptr<float>() + expected.numel(), ",")));
}

// Uneven partition sizes, one of them empty.
std::vector<int64_t> uneven_counts(int world_size) {
  const std::vector<int64_t> counts{5, 0, 3, 2};
  return {counts.begin(), counts.begin() + world_size};
}

int64_t offset_of(const std::vector<int64_t>& counts, int rank) {
  return std::accumulate(counts.begin(), counts.begin() + rank, int64_t{0});
}

constexpr ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin};

const bool all_reduce_registered = register_scenario("all_reduce", [](RankContext& ctx) {
  for (ReduceOp op : kOps) {
    at::Tensor data = rank_data(ctx.rank, 7);  // 7 elements: not a multiple of the world size
    ctx.comm.all_reduce(data, op);
    check_equal(data, reduce_over_ranks(ctx.world_size, 7, op), fmt::format("all_reduce op {}", static_cast<int>(op)));
  }
  at::Tensor integers = rank_data(ctx.rank, 5, at::kInt);
  ctx.comm.all_reduce(integers);
  SCENARIO_CHECK(at::equal(integers, reduce_over_ranks(ctx.world_size, 5, ReduceOp::kSum, at::kInt)), "int sum");
});

const bool reduce_scatter_registered = register_scenario("reduce_scatter", [](RankContext& ctx) {
  const int64_t shard = 3;
  for (ReduceOp op : kOps) {
    at::Tensor output = at::full({shard}, -99.0f);
    ctx.comm.reduce_scatter(rank_data(ctx.rank, shard * ctx.world_size), output, op);
    const at::Tensor full = reduce_over_ranks(ctx.world_size, shard * ctx.world_size, op);
    check_equal(output, full.narrow(0, ctx.rank * shard, shard),
                fmt::format("reduce_scatter op {}", static_cast<int>(op)));
  }
  const std::vector<int64_t> counts = uneven_counts(ctx.world_size);
  const int64_t total = offset_of(counts, ctx.world_size);
  for (ReduceOp op : kOps) {
    at::Tensor output = at::full({counts[ctx.rank]}, -99.0f);
    ctx.comm.reduce_scatter_v(rank_data(ctx.rank, total), output, counts, op);
    const at::Tensor full = reduce_over_ranks(ctx.world_size, total, op);
    check_equal(output, full.narrow(0, offset_of(counts, ctx.rank), counts[ctx.rank]),
                fmt::format("reduce_scatter_v op {}", static_cast<int>(op)));
  }
});

// While installed: LibTorch's CPU allocations on every thread (the caller's and the backend's workers), and the
// most bytes they held at once beyond what was held when it was installed.
class CountingAllocator final : public c10::Allocator {
 public:
  CountingAllocator() : base_(c10::GetCPUAllocator()) { c10::SetCPUAllocator(this, kPriority); }
  ~CountingAllocator() override { c10::SetCPUAllocator(base_, kPriority); }
  CountingAllocator(const CountingAllocator&) = delete;
  CountingAllocator& operator=(const CountingAllocator&) = delete;

  c10::DataPtr allocate(size_t bytes) override {
    c10::DataPtr inner = base_->allocate(bytes);
    void* data = inner.get();
    const c10::Device device = inner.device();
    held_ += static_cast<int64_t>(bytes);
    peak_ = std::max(peak_.load(), held_.load());
    return {data, new Allocation{std::move(inner), bytes, this}, &release, device};
  }
  void copy_data(void* dest, const void* src, std::size_t count) const override { std::memcpy(dest, src, count); }
  int64_t peak() const { return peak_; }

 private:
  static constexpr uint8_t kPriority = 100;  // above LibTorch's own registration
  struct Allocation {
    c10::DataPtr inner;
    size_t bytes;
    CountingAllocator* owner;
  };
  static void release(void* context) {
    auto* allocation = static_cast<Allocation*>(context);
    allocation->owner->held_ -= static_cast<int64_t>(allocation->bytes);
    delete allocation;
  }
  c10::Allocator* base_;
  std::atomic<int64_t> held_{0}, peak_{0};
};

constexpr int64_t kAllocationSlack = int64_t{64} << 10;

// Note [Reduce-scatter keeps its own piece]: the one buffer a reduce-scatter allocates holds the other ranks'
// pieces of this rank's shard, not its own; the sums are still exact (checked against the local reduction).
const bool reduce_scatter_buffer_registered = register_scenario("reduce_scatter_buffer", [](RankContext& ctx) {
  const int64_t shard = int64_t{1} << 20;  // 4 MiB of fp32 per rank
  const at::Tensor input = rank_data(ctx.rank, shard * ctx.world_size);
  at::Tensor output = at::empty({shard});
  int64_t peak = 0;
  {
    CountingAllocator counting;
    ctx.comm.reduce_scatter(input, output);
    peak = counting.peak();
  }
  check_equal(
      output,
      reduce_over_ranks(ctx.world_size, shard * ctx.world_size, ReduceOp::kSum).narrow(0, ctx.rank * shard, shard),
      "reduce_scatter");
  const int64_t others = (ctx.world_size - 1) * shard * static_cast<int64_t>(sizeof(float));
  SCENARIO_CHECK(peak >= others && peak <= others + kAllocationSlack,
                 "allocated at most {} bytes at once, expected the other {} ranks' pieces ({} bytes)", peak,
                 ctx.world_size - 1, others);
});

// Note [Gloo's all-gather in place]: an all-gather, even or uneven, allocates nothing of the gathered size.
const bool all_gather_buffer_registered = register_scenario("all_gather_buffer", [](RankContext& ctx) {
  const int64_t shard = int64_t{1} << 20;  // 4 MiB of fp32 per rank
  at::Tensor output = at::empty({shard * ctx.world_size});
  std::vector<int64_t> counts;
  for (int rank = 0; rank < ctx.world_size; ++rank) counts.push_back(shard - 1000 * rank);
  at::Tensor uneven_output = at::empty({offset_of(counts, ctx.world_size)});
  const at::Tensor mine = rank_data(ctx.rank, shard), mine_uneven = rank_data(ctx.rank, counts[ctx.rank]);
  int64_t peak = 0;
  {
    CountingAllocator counting;
    ctx.comm.all_gather(mine, output);
    ctx.comm.all_gather_v(mine_uneven, uneven_output, counts);
    peak = counting.peak();
  }
  std::vector<at::Tensor> expected, expected_uneven;
  for (int rank = 0; rank < ctx.world_size; ++rank) {
    expected.push_back(rank_data(rank, shard));
    expected_uneven.push_back(rank_data(rank, counts[rank]));
  }
  check_equal(output, at::cat(expected), "all_gather");
  check_equal(uneven_output, at::cat(expected_uneven), "all_gather_v");
  SCENARIO_CHECK(peak <= kAllocationSlack, "allocated {} bytes at once during the all-gathers, expected none", peak);
});

const bool all_gather_registered = register_scenario("all_gather", [](RankContext& ctx) {
  const int64_t shard = 4;
  at::Tensor output = at::full({shard * ctx.world_size}, -99.0f);
  ctx.comm.all_gather(rank_data(ctx.rank, shard), output);
  std::vector<at::Tensor> expected;
  for (int rank = 0; rank < ctx.world_size; ++rank) expected.push_back(rank_data(rank, shard));
  check_equal(output, at::cat(expected), "all_gather");

  const std::vector<int64_t> counts = uneven_counts(ctx.world_size);
  at::Tensor gathered = at::full({offset_of(counts, ctx.world_size)}, -99.0f);
  ctx.comm.all_gather_v(rank_data(ctx.rank, counts[ctx.rank]), gathered, counts);
  expected.clear();
  for (int rank = 0; rank < ctx.world_size; ++rank) expected.push_back(rank_data(rank, counts[rank]));
  check_equal(gathered, at::cat(expected), "all_gather_v");
});

// What `from` sends to `to` in the uneven all-to-all: (from + 2*to) % 3 + 1 elements, encoded with both.
int64_t a2a_count(int from, int to) { return (from + 2 * to) % 3 + 1; }
at::Tensor a2a_chunk(int from, int to) {
  return at::arange(a2a_count(from, to), at::kFloat).add(1000 * from + 100 * to);
}

const bool all_to_all_registered = register_scenario("all_to_all", [](RankContext& ctx) {
  std::vector<int64_t> send_counts, recv_counts;
  std::vector<at::Tensor> sent, expected;
  for (int peer = 0; peer < ctx.world_size; ++peer) {
    send_counts.push_back(a2a_count(ctx.rank, peer));
    recv_counts.push_back(a2a_count(peer, ctx.rank));
    sent.push_back(a2a_chunk(ctx.rank, peer));
    expected.push_back(a2a_chunk(peer, ctx.rank));
  }
  at::Tensor output = at::full({offset_of(recv_counts, ctx.world_size)}, -99.0f);
  ctx.comm.all_to_all(at::cat(sent), output, send_counts, recv_counts);
  check_equal(output, at::cat(expected), "all_to_all uneven");

  at::Tensor even_output = at::empty({2 * ctx.world_size});
  ctx.comm.all_to_all(at::arange(2 * ctx.world_size, at::kFloat).add(100 * ctx.rank), even_output);
  std::vector<at::Tensor> even_expected;
  for (int peer = 0; peer < ctx.world_size; ++peer) {
    even_expected.push_back(at::arange(2, at::kFloat).add(100 * peer + 2 * ctx.rank));
  }
  check_equal(even_output, at::cat(even_expected), "all_to_all even");
});

const bool broadcast_registered = register_scenario("broadcast", [](RankContext& ctx) {
  const int root = ctx.world_size - 1;
  at::Tensor data = ctx.rank == root ? rank_data(root, 9) : at::zeros({9});
  ctx.comm.broadcast(data, root);
  check_equal(data, rank_data(root, 9), "broadcast");
  ctx.comm.barrier();
});

// Three collectives in flight at once, waited for in reverse order.
const bool async_registered = register_scenario("async_overlap", [](RankContext& ctx) {
  at::Tensor reduced = rank_data(ctx.rank, 1000);
  at::Tensor gathered = at::empty({5 * ctx.world_size});
  at::Tensor shard = at::empty({6});
  Work first = ctx.comm.all_reduce_async(reduced);
  Work second = ctx.comm.all_gather_async(rank_data(ctx.rank, 5), gathered);
  Work third = ctx.comm.reduce_scatter_async(rank_data(ctx.rank, 6 * ctx.world_size), shard);
  third.wait();
  second.wait();
  first.wait();
  first.wait();  // idempotent
  SCENARIO_CHECK(first.is_completed() && second.is_completed() && third.is_completed(), "completed");
  check_equal(reduced, reduce_over_ranks(ctx.world_size, 1000, ReduceOp::kSum), "overlapped all_reduce");
  std::vector<at::Tensor> expected;
  for (int rank = 0; rank < ctx.world_size; ++rank) expected.push_back(rank_data(rank, 5));
  check_equal(gathered, at::cat(expected), "overlapped all_gather");
  check_equal(shard, reduce_over_ranks(ctx.world_size, 6 * ctx.world_size, ReduceOp::kSum).narrow(0, 6 * ctx.rank, 6),
              "overlapped reduce_scatter");
});

// World of 3: {0, 2} and {2, 1} (members listed out of order), then the world again.
const bool sub_group_registered = register_scenario("sub_groups", [](RankContext& ctx) {
  SCENARIO_CHECK(ctx.world_size == 3, "needs 3 ranks");
  if (ctx.rank != 1) {
    auto pair = ctx.comm.new_group({0, 2});
    SCENARIO_CHECK(pair->world_size() == 2 && pair->rank() == (ctx.rank == 0 ? 0 : 1), "rank in {{0,2}}");
    SCENARIO_CHECK((pair->global_ranks() == std::vector<int>{0, 2}), "global ranks of {{0,2}}");
    at::Tensor data = at::full({3}, static_cast<float>(ctx.rank + 1));
    pair->all_reduce(data);
    check_equal(data, at::full({3}, 4.0f), "sub-group all_reduce");
    at::Tensor gathered = at::empty({4});
    pair->all_gather(at::full({2}, static_cast<float>(ctx.rank)), gathered);
    check_equal(gathered, at::tensor({0.0f, 0.0f, 2.0f, 2.0f}), "sub-group all_gather");
  }
  if (ctx.rank != 0) {
    auto reversed = ctx.comm.new_group({2, 1});
    SCENARIO_CHECK(reversed->rank() == (ctx.rank == 2 ? 0 : 1), "rank in {{2,1}}");
    at::Tensor data = ctx.rank == 2 ? at::full({2}, 7.0f) : at::zeros({2});
    reversed->broadcast(data, 0);  // group rank 0 is global rank 2
    check_equal(data, at::full({2}, 7.0f), "sub-group broadcast");
  }
  at::Tensor everyone = at::ones({2});
  ctx.comm.all_reduce(everyone);
  check_equal(everyone, at::full({2}, 3.0f), "world all_reduce after sub-groups");
});

// bfloat16, which Gloo in LibTorch 1.13 neither moves nor reduces: every collective must still work (the
// values are small integers, exact in bf16, so results compare exactly).
const bool bf16_registered = register_scenario("bf16", [](RankContext& ctx) {
  auto bf16 = [](const at::Tensor& t) { return t.to(at::kBFloat16); };
  auto check_bf16 = [](const at::Tensor& actual, const at::Tensor& expected, const std::string& what) {
    SCENARIO_CHECK(actual.scalar_type() == at::kBFloat16, "{}: dtype changed to {}", what,
                   c10::toString(actual.scalar_type()));
    check_equal(actual.to(at::kFloat), expected, what);
  };
  at::Tensor summed = bf16(rank_data(ctx.rank, 7));
  ctx.comm.all_reduce(summed);
  check_bf16(summed, reduce_over_ranks(ctx.world_size, 7, ReduceOp::kSum), "bf16 all_reduce");

  const std::vector<int64_t> counts = uneven_counts(ctx.world_size);
  const int64_t total = offset_of(counts, ctx.world_size);
  at::Tensor shard = bf16(at::full({counts[ctx.rank]}, -99.0f));
  ctx.comm.reduce_scatter_v(bf16(rank_data(ctx.rank, total)), shard, counts);
  check_bf16(
      shard,
      reduce_over_ranks(ctx.world_size, total, ReduceOp::kSum).narrow(0, offset_of(counts, ctx.rank), counts[ctx.rank]),
      "bf16 reduce_scatter_v");

  at::Tensor gathered = bf16(at::full({4 * ctx.world_size}, -99.0f));
  ctx.comm.all_gather(bf16(rank_data(ctx.rank, 4)), gathered);
  std::vector<at::Tensor> expected;
  for (int rank = 0; rank < ctx.world_size; ++rank) expected.push_back(rank_data(rank, 4));
  check_bf16(gathered, at::cat(expected), "bf16 all_gather");

  at::Tensor root_data = bf16(rank_data(ctx.rank, 5));
  ctx.comm.broadcast(root_data, 1);
  check_bf16(root_data, rank_data(1, 5), "bf16 broadcast");
});

// Note [Gloo and CUDA tensors]: ranks sharing one GPU (debug.share_cuda_device) send CUDA tensors over Gloo
// through host copies; every collective must give what it gives on host tensors, on the device.
const bool cuda_over_gloo_registered = register_scenario("cuda_over_gloo", [](RankContext& ctx) {
  const auto cuda = [](const at::Tensor& t) { return t.to(at::kCUDA); };
  for (ReduceOp op : kOps) {
    at::Tensor data = cuda(rank_data(ctx.rank, 7));
    ctx.comm.all_reduce(data, op);
    SCENARIO_CHECK(data.is_cuda(), "all_reduce left the device");
    check_equal(data.cpu(), reduce_over_ranks(ctx.world_size, 7, op),
                fmt::format("CUDA all_reduce op {}", static_cast<int>(op)));
  }
  at::Tensor bf16 = cuda(rank_data(ctx.rank, 7)).to(at::kBFloat16);
  ctx.comm.all_reduce(bf16);
  check_equal(bf16.to(at::kFloat).cpu(), reduce_over_ranks(ctx.world_size, 7, ReduceOp::kSum), "CUDA bf16 all_reduce");

  const std::vector<int64_t> counts = uneven_counts(ctx.world_size);
  const int64_t total = offset_of(counts, ctx.world_size);
  at::Tensor shard = cuda(at::full({counts[ctx.rank]}, -99.0f));
  ctx.comm.reduce_scatter_v(cuda(rank_data(ctx.rank, total)), shard, counts);
  check_equal(
      shard.cpu(),
      reduce_over_ranks(ctx.world_size, total, ReduceOp::kSum).narrow(0, offset_of(counts, ctx.rank), counts[ctx.rank]),
      "CUDA reduce_scatter_v");

  std::vector<at::Tensor> pieces;
  for (int rank = 0; rank < ctx.world_size; ++rank) pieces.push_back(rank_data(rank, 4));
  at::Tensor gathered = cuda(at::full({4 * ctx.world_size}, -99.0f));
  ctx.comm.all_gather(cuda(rank_data(ctx.rank, 4)), gathered);
  check_equal(gathered.cpu(), at::cat(pieces), "CUDA all_gather");

  std::vector<at::Tensor> uneven;
  for (int rank = 0; rank < ctx.world_size; ++rank) uneven.push_back(rank_data(rank, counts[rank]));
  at::Tensor gathered_v = cuda(at::full({total}, -99.0f));
  ctx.comm.all_gather_v(cuda(rank_data(ctx.rank, counts[ctx.rank])), gathered_v, counts);
  check_equal(gathered_v.cpu(), at::cat(uneven), "CUDA all_gather_v");

  at::Tensor exchanged = cuda(at::full({2 * ctx.world_size}, -99.0f));
  ctx.comm.all_to_all(cuda(rank_data(ctx.rank, 2 * ctx.world_size)), exchanged);
  std::vector<at::Tensor> received;
  for (int rank = 0; rank < ctx.world_size; ++rank)
    received.push_back(rank_data(rank, 2 * ctx.world_size).narrow(0, 2 * ctx.rank, 2));
  check_equal(exchanged.cpu(), at::cat(received), "CUDA all_to_all");

  at::Tensor root_data = cuda(rank_data(ctx.rank, 5));
  ctx.comm.broadcast(root_data, 1);
  check_equal(root_data.cpu(), rank_data(1, 5), "CUDA broadcast");
  ctx.comm.barrier();
});

void expect_scenario_passes(const std::string& name, int world_size) {
  const ScenarioRun run = run_scenario(name, world_size);
  EXPECT_EQ(run.result.exit_code, 0) << run.all_output();
  EXPECT_LT(run.seconds, 15.0);
}

class CollectivesTest : public ::testing::TestWithParam<int> {};

TEST_P(CollectivesTest, AllReduceSumAvgMaxMinUneven) { expect_scenario_passes("all_reduce", GetParam()); }
TEST_P(CollectivesTest, ReduceScatterEvenAndUneven) { expect_scenario_passes("reduce_scatter", GetParam()); }
TEST_P(CollectivesTest, ReduceScatterReceivesOnlyTheOtherRanksPieces) {
  expect_scenario_passes("reduce_scatter_buffer", GetParam());
}
TEST_P(CollectivesTest, AllGatherAllocatesNothingOfTheGatheredSize) {
  expect_scenario_passes("all_gather_buffer", GetParam());
}
TEST_P(CollectivesTest, AllGatherEvenAndUneven) { expect_scenario_passes("all_gather", GetParam()); }
TEST_P(CollectivesTest, AllToAllUnevenAndEvenSplits) { expect_scenario_passes("all_to_all", GetParam()); }
TEST_P(CollectivesTest, BroadcastAndBarrier) { expect_scenario_passes("broadcast", GetParam()); }
TEST_P(CollectivesTest, AsyncCollectivesOverlap) { expect_scenario_passes("async_overlap", GetParam()); }
TEST_P(CollectivesTest, Bfloat16CollectivesWorkOnGloo) { expect_scenario_passes("bf16", GetParam()); }

INSTANTIATE_TEST_SUITE_P(Ranks, CollectivesTest, ::testing::Values(2, 3), ::testing::PrintToStringParamName());

// Four ranks: two of them in the middle, whose own piece splits the input (Note [Reduce-scatter keeps its own
// piece]), and three exchanges per all-gather (Note [Gloo's all-gather in place]).
TEST(CollectivesFourRanksTest, ReduceScatterEvenAndUneven) { expect_scenario_passes("reduce_scatter", 4); }
TEST(CollectivesFourRanksTest, AllGatherEvenAndUneven) { expect_scenario_passes("all_gather", 4); }

// Two ranks on one GPU (the scenario's ranks exec afresh, so this process may have touched CUDA).
TEST(GlooCudaTest, RanksSharingOneGpuGetEveryCollectiveRight) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device here";
  expect_scenario_passes("cuda_over_gloo", 2);
}

TEST(SubGroupTest, CollectivesWithinSubGroupsThenWorld) { expect_scenario_passes("sub_groups", 3); }

// ---- in-process: a world of one rank, argument errors ------------------------------------------------

TEST(SingleRankTest, EveryCollectiveWorksAlone) {
  auto comm = Comm::create({0, 1});
  at::Tensor data = at::arange(4, at::kFloat);
  comm->all_reduce(data, ReduceOp::kAvg);
  EXPECT_TRUE(at::equal(data, at::arange(4, at::kFloat)));
  at::Tensor output = at::empty({4});
  comm->reduce_scatter(data, output);
  comm->all_gather(data, output);
  comm->all_to_all(data, output);
  comm->broadcast(data, 0);
  comm->barrier();
  EXPECT_TRUE(at::equal(output, data));
  EXPECT_EQ(comm->counters().total().calls, 6u);
  EXPECT_EQ(comm->counters().total().bytes_sent, 0u);  // nothing leaves a single rank
}

// Note [One-rank groups]: each collective is its local copy, done before the call returns.
TEST(SingleRankTest, CollectivesAreTheirLocalCopyCompleteOnReturn) {
  auto comm = Comm::create({0, 1});
  const at::Tensor input = at::randn({6});
  auto expect_copied = [&](const char* what, Work work, const at::Tensor& output) {
    EXPECT_TRUE(work.is_completed()) << what << " was left to a backend thread";
    work.wait();
    EXPECT_TRUE(at::equal(output, input)) << what;
  };
  at::Tensor output = at::full({6}, -1.0f);
  expect_copied("reduce_scatter", comm->reduce_scatter_async(input, output, ReduceOp::kMax), output);
  output.fill_(-1);
  expect_copied("reduce_scatter_v", comm->reduce_scatter_v_async(input, output, {6}, ReduceOp::kAvg), output);
  output.fill_(-1);
  expect_copied("all_gather", comm->all_gather_async(input, output), output);
  output.fill_(-1);
  expect_copied("all_gather_v", comm->all_gather_v_async(input, output, {6}), output);
  output.fill_(-1);
  expect_copied("all_to_all", comm->all_to_all_async(input, output, {6}, {6}), output);
  at::Tensor reduced = input.to(at::kBFloat16);
  const at::Tensor before = reduced.clone();
  Work average = comm->all_reduce_async(reduced, ReduceOp::kAvg);
  EXPECT_TRUE(average.is_completed());
  EXPECT_TRUE(at::equal(reduced, before));  // the average over one rank of a bf16 tensor is itself
  EXPECT_TRUE(comm->broadcast_async(reduced, 0).is_completed());
  EXPECT_TRUE(comm->barrier_async().is_completed());
  EXPECT_EQ(comm->counters().total().calls, 8u);
}

TEST(SingleRankTest, BadArgumentsAreClearErrors) {
  auto comm = Comm::create({0, 1});
  at::Tensor output = at::empty({3});
  try {
    comm->reduce_scatter(at::zeros({4}), output);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("reduce_scatter: the input tensor has 4 elements but needs 3"),
              std::string::npos)
        << e.what();
  }
  at::Tensor integers = at::zeros({2}, at::kInt);
  EXPECT_THROW(comm->all_reduce(integers, ReduceOp::kAvg), Error);
  EXPECT_THROW(comm->all_reduce(at::zeros({4, 4}).t()), Error);  // not contiguous
  EXPECT_THROW(comm->new_group({0, 0}), Error);
}

// ---- CUDA builds with a device: NCCL for CUDA tensors (one rank: NCCL allows one rank per GPU) ---------

at::TensorOptions on_cuda() { return at::TensorOptions().dtype(at::kFloat).device(at::kCUDA); }

TEST(NcclTest, AutoSendsCudaTensorsThroughNcclAndCpuTensorsThroughGloo) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device here";
  auto comm = Comm::create({0, 1});
  at::Tensor data = at::arange(8, on_cuda());
  at::Tensor output = at::full({8}, -1.0f, on_cuda());
  comm->all_reduce(data, ReduceOp::kAvg);
  comm->reduce_scatter(data, output, ReduceOp::kMax);
  EXPECT_TRUE(at::equal(output.cpu(), at::arange(8, at::kFloat)));
  output.fill_(-1);
  comm->all_gather(data, output);
  EXPECT_TRUE(at::equal(output.cpu(), at::arange(8, at::kFloat)));
  output.fill_(-1);
  comm->all_gather_v(data, output, {8});
  comm->reduce_scatter_v(data, output, {8});
  comm->all_to_all(data, output);
  comm->broadcast(output, 0);
  comm->barrier();
  EXPECT_TRUE(at::equal(output.cpu(), at::arange(8, at::kFloat)));
  at::Tensor on_host = at::ones({3});
  comm->all_reduce(on_host);
  EXPECT_TRUE(at::equal(on_host, at::ones({3})));
  EXPECT_EQ(comm->counters()[CollectiveKind::kAllReduce].calls, 2u);
}

// CommOptions::one_rank_groups_use_nccl (debug.nccl_single_rank): a one-rank job's collectives really run
// through NCCL, and give what completing them locally gives (Note [One-rank groups]).
TEST(NcclTest, OneRankThroughNcclGivesTheLocalResult) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device here";
  CommOptions through_nccl;
  through_nccl.one_rank_groups_use_nccl = true;
  auto nccl = Comm::create({0, 1}, through_nccl);
  auto local = Comm::create({0, 1});
  for (Comm* comm : {nccl.get(), local.get()}) {
    at::Tensor data = at::arange(8, on_cuda()).mul(0.5);
    at::Tensor output = at::full({8}, -1.0f, on_cuda());
    comm->all_reduce(data, ReduceOp::kAvg);
    comm->reduce_scatter_v(data, output, {8});
    comm->all_gather(output, data);
    comm->all_to_all(data, output);
    comm->broadcast(output, 0);
    comm->barrier();
    EXPECT_TRUE(at::equal(output.cpu(), at::arange(8, at::kFloat).mul(0.5)));
  }
  // The NCCL path was taken: NCCL's collectives are polled (Work::State::poll), their bytes counted alike.
  EXPECT_EQ(nccl->counters()[CollectiveKind::kAllReduce].calls, local->counters()[CollectiveKind::kAllReduce].calls);
}

TEST(BackendTest, NcclForOneRankWithoutNcclIsAClearError) {
  if (at::hasCUDA()) GTEST_SKIP() << "CUDA is available here";
  CommOptions options;
  options.one_rank_groups_use_nccl = true;
  try {
    Comm::create({0, 1}, options);
    FAIL() << "expected an error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("debug.nccl_single_rank needs NCCL"), std::string::npos) << e.what();
  }
}

// comm.backend = "nccl" has no Gloo: host tensors (the engine's agreements between ranks are int64 host
// tensors) travel through the GPU and come back into the caller's tensors (Note [Gloo and CUDA tensors]).
TEST(NcclTest, ForcedNcclMovesCpuTensorsThroughTheGpu) {
  if (!at::hasCUDA()) GTEST_SKIP() << "no CUDA device here";
  CommOptions options;
  options.backend = Backend::kNccl;
  options.one_rank_groups_use_nccl = true;  // one rank, but really through NCCL
  auto comm = Comm::create({0, 1}, options);
  at::Tensor data = at::ones({4}, on_cuda());
  comm->all_reduce(data);
  EXPECT_TRUE(at::equal(data.cpu(), at::ones({4})));
  at::Tensor id = at::tensor({int64_t{7}, int64_t{-3}}, at::kLong);
  at::Tensor ids = at::zeros({2}, at::kLong);
  comm->all_reduce(id, ReduceOp::kMin);
  comm->all_gather(id, ids);
  EXPECT_TRUE(at::equal(ids, at::tensor({int64_t{7}, int64_t{-3}}, at::kLong)));
  at::Tensor values = at::arange(6, at::kFloat).mul(0.25);
  at::Tensor shard = at::full({6}, -1.0f);
  comm->reduce_scatter_v(values, shard, {6});
  comm->all_to_all(shard, values);
  comm->broadcast(values, 0);
  EXPECT_TRUE(values.device().is_cpu());
  EXPECT_TRUE(at::equal(values, at::arange(6, at::kFloat).mul(0.25)));
  EXPECT_EQ(comm->counters()[CollectiveKind::kAllReduce].calls, 2u);
}

TEST(BackendTest, NcclWithoutCudaIsAClearError) {
  if (at::hasCUDA()) GTEST_SKIP() << "CUDA is available here";
  CommOptions options;
  options.backend = parse_backend("nccl");
  try {
    Comm::create({0, 1}, options);
    FAIL() << "expected an error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("comm.backend = \"nccl\" needs"), std::string::npos) << e.what();
  }
}

TEST(BackendTest, UnknownBackendSuggestsTheClosest) {
  try {
    parse_backend("glo");
    FAIL() << "expected an error";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'gloo'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zhost::comm::testing
