// host/services/param_store.hpp: the host side of zhost_param_services
// (zhost/host.h): parameter storage that a partition plugin which partitions
// parameters (ZeRO stage 3) materialises and releases.
//
// A group is one flat storage (a c10::StorageImpl) that several parameters
// view, as PyTorch's FSDP does with its flat parameter. Releasing frees the
// storage's bytes but keeps the StorageImpl, so every tensor that views it (the
// parameters, and the views autograd saved for backward, e.g. a linear's
// weight.t()) follows it: no stale copy stays alive between a block's forward
// and its backward.
#pragma once

#include <cstdint>
#include <memory>

#include "zhost/host.h"

namespace zhost::model {
class Model;
}

namespace zhost {

class HostServices;

class ParamStore {
 public:
  // Serves `model`'s parameters through `services` (set_param_services) until
  // destroyed.
  ParamStore(model::Model& model, HostServices& services);
  ~ParamStore();
  ParamStore(const ParamStore&) = delete;
  ParamStore& operator=(const ParamStore&) = delete;

  // True when parameter `id` belongs to a materialised group.
  bool has_storage(size_t id) const;
  uint64_t live_bytes() const;       // bytes of materialised groups now
  uint64_t peak_bytes() const;       // their high-water mark over the run
  void begin_step();                 // starts the step's high-water mark at what is materialised now
  uint64_t step_peak_bytes() const;  // the high-water mark since begin_step()

  struct State;

 private:
  std::unique_ptr<State> state_;
  HostServices& services_;
};

}  // namespace zhost
