// host/engine/observers/model_states_observer.cpp: the model-state figures once more after training
// (model_states.hpp), for a job whose parameters are partitioned: their gather window's peak over the run
// (Note [Step observers]).
#include "host/engine/observers/observers.hpp"

namespace zhost::engine {
namespace {

class ModelStatesObserver : public StepObserver {
 public:
  explicit ModelStatesObserver(const ObserverContext& c) : report_(c.final_model_states) {}
  void on_finish(TrainResult&) override { report_(); }

 private:
  std::function<void()> report_;
};

}  // namespace

std::unique_ptr<StepObserver> make_model_states_observer(const ObserverContext& context) {
  return std::make_unique<ModelStatesObserver>(context);
}

}  // namespace zhost::engine
