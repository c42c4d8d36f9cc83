// plugins/quant_zeropp/wire.cpp: see wire.hpp.
#include "plugins/quant_zeropp/wire.hpp"

namespace zhost::zeropp::wire {
namespace {

zhost_collective_args like(const zhost_collective_args& serving, zhost_group* group, const DLTensor& send,
                           DLTensor& recv) {
  zhost_collective_args args{};
  args.struct_size = sizeof(args);
  args.group = group;
  args.send = &send;
  args.recv = &recv;
  args.op = ZHOST_REDUCE_SUM;
  args.intent = serving.intent;
  args.block = serving.block;
  return args;
}

}  // namespace

int world_size(const sdk::Host& host, zhost_group* group) { return host.group_info(group).size; }
int rank(const sdk::Host& host, zhost_group* group) { return host.group_info(group).rank; }

int64_t numel(const DLTensor& view) {
  int64_t n = 1;
  for (int32_t d = 0; d < view.ndim; ++d) n *= view.shape[d];
  return n;
}

void* data(const DLTensor& view) { return static_cast<uint8_t*>(view.data) + view.byte_offset; }

void require(bool ok, const char* what) {
  if (!ok) throw sdk::PluginError(ZHOST_ERR_INVALID_ARGUMENT, std::string("quant_zeropp: ") + what);
}

void all_gather(const sdk::Host& host, const zhost_collective_args& serving, const DLTensor& send, DLTensor& recv) {
  zhost_collective_args args = like(serving, serving.group, send, recv);
  host.check(host.collectives().all_gather(host.context(), &args));
}

void all_to_all(const sdk::Host& host, const zhost_collective_args& serving, zhost_group* group, const DLTensor& send,
                DLTensor& recv) {
  zhost_collective_args args = like(serving, group, send, recv);
  host.check(host.collectives().all_to_all(host.context(), &args));
}

}  // namespace zhost::zeropp::wire
