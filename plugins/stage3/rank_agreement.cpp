// plugins/stage3/rank_agreement.cpp: ranks compare which collective they start and their block order (see
// the header).
#include "plugins/stage3/rank_agreement.hpp"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>

#include "zhost/kit/dlpack_views.hpp"
#include "zhost/kit/format.hpp"
#include "zhost/zero/plugin_calls.hpp"

namespace zhost::stage3 {
namespace {

const char* kind_name(int64_t kind) {
  return kind == static_cast<int64_t>(RankAgreement::Collective::kGather) ? "gather" : "reduce the gradients of";
}

}  // namespace

RankAgreement::RankAgreement(const sdk::Host& host, at::Device device, bool each_collective, int units,
                             UnitName unit_name)
    : host_(host),
      device_(device),
      each_collective_(each_collective),
      rank_(host.group_info().rank),
      world_size_(host.group_info().size),
      units_(units),
      unit_name_(std::move(unit_name)) {}

std::vector<int64_t> RankAgreement::all_gather_ints(const std::vector<int64_t>& mine) const {
  const auto count = static_cast<int64_t>(mine.size());
  at::Tensor send =
      at::from_blob(const_cast<int64_t*>(mine.data()), {count}, at::TensorOptions().dtype(at::kLong)).to(device_);
  at::Tensor recv = at::empty({count * world_size_}, at::TensorOptions().dtype(at::kLong).device(device_));
  DLTensor send_dl = kit::dl_view(send), recv_dl = kit::dl_view(recv);
  zhost_collective_args args = zero::collective_args(ZHOST_INTENT_GENERIC);
  args.send = &send_dl;
  args.recv = &recv_dl;
  host_.check(host_.collectives().all_gather(host_.context(), &args));
  const at::Tensor on_host = recv.cpu().contiguous();
  return std::vector<int64_t>(on_host.data_ptr<int64_t>(), on_host.data_ptr<int64_t>() + on_host.numel());
}

void RankAgreement::before(Collective collective, int unit, int64_t step) const {
  // One rank: nobody to disagree with, and no device round trip; per micro-batch: compare_block_order checks.
  if (world_size_ == 1 || !each_collective_) return;
  const auto kind = static_cast<int64_t>(collective);
  std::vector<int64_t> all;
  {
    zero::ScopedSpan blocked(host_, "rank_agreement");
    all = all_gather_ints({kind, unit});
  }
  for (int r = 0; r < world_size_; ++r) {
    if (all[2 * r] == kind && all[2 * r + 1] == unit) continue;
    const int64_t other_kind = all[2 * r], other_unit = all[2 * r + 1];
    const bool valid = other_unit >= 0 && other_unit < units_ &&
                       (other_kind == static_cast<int64_t>(Collective::kGather) ||
                        other_kind == static_cast<int64_t>(Collective::kReduce));
    throw sdk::PluginError(
        ZHOST_ERR_INVALID_ARGUMENT,
        kit::format("stage3: ranks walk the blocks in different orders: in step {} rank {} is about to {} {} while "
                    "rank {} is about to {}; with ZeRO stage 3 every rank must run the same blocks in the same order "
                    "(rank-dependent control flow, e.g. layer drop with per-rank randomness, breaks this)",
                    step, rank_, kind_name(kind), unit_name_(unit), r,
                    valid ? kit::format("{} {}", kind_name(other_kind), unit_name_(static_cast<int>(other_unit)))
                          : std::string("do something else")));
  }
}

void RankAgreement::compare_block_order(uint64_t hash, size_t events, int64_t step, int32_t micro_step) const {
  if (world_size_ == 1) return;
  const std::vector<int64_t> hashes = all_gather_ints({static_cast<int64_t>(hash)});
  for (int r = 0; r < world_size_; ++r)
    if (hashes[r] != static_cast<int64_t>(hash))
      throw sdk::PluginError(
          ZHOST_ERR_INVALID_ARGUMENT,
          kit::format(
              "stage3: rank {} ran its blocks in another order than rank {} in step {} (micro-batch {}; rank {} ran {} "
              "block events); with ZeRO stage 3 every rank must run the same blocks in the same order",
              r, rank_, step, micro_step, rank_, events));
}

}  // namespace zhost::stage3
