// host/engine/observers/storage_swap_observer.cpp: the storage swaps after a step, by schedule and by control
// command (Note [Storage swap], storage_swap.hpp; Note [Control channel]; Note [Step observers]).
#include "host/engine/observers/observers.hpp"
#include "host/engine/storage_swap.hpp"
#include "host/telemetry/trace.hpp"

namespace zhost::engine {
namespace {

class StorageSwapObserver : public StepObserver {
 public:
  explicit StorageSwapObserver(const ObserverContext& c) : swaps_(*c.swaps), trace_(c.trace) {}

  // Rank 0 reads the control channel; the loss all-reduce tells the other ranks a command is waiting.
  void ask(BoundaryRequests& requests) override { requests.control_request += swaps_.waiting_request(); }

  // Collective. A stopping job swaps nothing.
  void after_step(const StepReport& report) override {
    if (report.stopping) return;
    const int64_t step = report.record.step;
    const TraceScope span(trace_, "swap", "storage_swap", "step", step);
    swaps_.after_step(step, report.control_request);
  }

 private:
  StorageSwaps& swaps_;
  TraceWriter* trace_;
};

}  // namespace

std::unique_ptr<StepObserver> make_storage_swap_observer(const ObserverContext& context) {
  return std::make_unique<StorageSwapObserver>(context);
}

}  // namespace zhost::engine
