// sdk/conformance/tier_checks.cpp: the checks of an offload tier (zhost/storage.h, zhost/optimizer.h, docs/abi.md
// "Tier contract"): declared roles against the tables, store/load round trips of odd sizes and alignments, drop,
// events (test and wait), export/import into a fresh instance, error statuses for bad calls and calls after
// failures, the two key namespaces, and for computing tiers the optimizer (whole and range steps) against the
// kit's reference, alone and over the kit's storage tier.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "checks.hpp"
#include "kit_storage.hpp"
#include "reference_optimizer.hpp"

namespace zhost::conformance {
namespace {

// A tier instance with throwing helpers over its table.
class Tier {
 public:
  explicit Tier(const CheckRun& run, KitStorage* storage = nullptr)
      : host_(with_storage(run, storage)),
        instance_(run.plugin, *host_),
        storage_(run.plugin.api().storage),
        optimizer_(run.plugin.api().optimizer) {
    expect(instance_.get() != nullptr, "create failed: " + instance_.error());
  }

  const zhost_storage_api& storage() const { return *storage_; }
  const zhost_optimizer_tier_api& opt() const { return *optimizer_; }
  zhost_plugin_instance* self() const { return instance_.get(); }

  // The one-field calls, with their args built here.
  zhost_status* wait(zhost_tier_event* event) const {
    zhost_tier_event_args args{sizeof(args), nullptr, event, 0};
    return storage_->wait(self(), &args);
  }
  zhost_status* test(zhost_tier_event* event, int32_t* done) const {
    zhost_tier_event_args args{sizeof(args), nullptr, event, -1};
    zhost_status* status = storage_->test(self(), &args);
    *done = args.done;
    return status;
  }
  zhost_status* drop(uint64_t key) const {
    zhost_tier_key_args args{sizeof(args), nullptr, key};
    return storage_->drop(self(), &args);
  }
  zhost_status* optimizer_drop(uint64_t key) const {
    zhost_tier_key_args args{sizeof(args), nullptr, key};
    return optimizer_->drop(self(), &args);
  }
  zhost_status* optimizer_grad_zero(uint64_t key) const {
    zhost_tier_key_args args{sizeof(args), nullptr, key};
    return optimizer_->grad_zero(self(), &args);
  }
  zhost_status* optimizer_grad(uint64_t key, DLTensor* out) const {
    zhost_tier_grad_args args{};
    args.struct_size = sizeof(args);
    args.key = key;
    zhost_status* status = optimizer_->grad(self(), &args);
    *out = args.grad;
    return status;
  }
  zhost_status* optimizer_grad_done(uint64_t key, int64_t offset, int64_t numel, int32_t* moved) const {
    zhost_tier_grad_done_args args{sizeof(args), nullptr, key, offset, numel, -1};
    zhost_status* status = optimizer_->grad_done(self(), &args);
    *moved = args.moved;
    return status;
  }

  // NULL status, else a CheckFailed naming `what`.
  void ok(zhost_status* status, const std::string& what) const {
    zhost_status_code code = ZHOST_OK;
    const std::string message = host_->take_message(status, &code);
    expect(code == ZHOST_OK, what + " failed (code " + std::to_string(code) + "): " + message);
  }
  // A non-NULL status of `expected` code (any error code when ZHOST_OK), else a CheckFailed.
  void refused(zhost_status* status, zhost_status_code expected, const std::string& what) const {
    zhost_status_code code = ZHOST_OK;
    const std::string message = host_->take_message(status, &code);
    expect(code != ZHOST_OK, what + " was accepted; it must return an error status");
    expect(expected == ZHOST_OK || code == expected,
           what + " returned code " + std::to_string(code) + ", expected " + std::to_string(expected) + ": " + message);
    expect(!message.empty(), what + " returned an error status without a message");
  }

  // Completes an operation's event: test until done (bounded), then wait.
  void complete(zhost_tier_event* event, const std::string& what) const {
    for (int poll = 0; poll < 1000; ++poll) {
      int32_t done = -1;
      ok(test(event, &done), what + ": test");
      expect(done == 0 || done == 1, what + ": test set done to neither 0 nor 1");
      if (done) return;  // completed and freed
    }
    if (event) ok(wait(event), what + ": wait");
  }

  zhost_status* io(bool store, uint64_t key, DLTensor& data, zhost_tier_event** event) const {
    zhost_tier_io_args args{};
    args.struct_size = sizeof(args);
    args.key = key;
    args.data = &data;
    zhost_status* status = (store ? storage_->store : storage_->load)(self(), &args);
    *event = args.event;
    return status;
  }
  void store(uint64_t key, DLTensor data) const {
    zhost_tier_event* event = nullptr;
    ok(io(true, key, data, &event), "store of key " + std::to_string(key));
    complete(event, "store of key " + std::to_string(key));
  }
  void load(uint64_t key, DLTensor data) const {
    zhost_tier_event* event = nullptr;
    ok(io(false, key, data, &event), "load of key " + std::to_string(key));
    complete(event, "load of key " + std::to_string(key));
  }
  zhost_status* try_load(uint64_t key, DLTensor data) const {
    zhost_tier_event* event = nullptr;
    zhost_status* status = io(false, key, data, &event);
    if (!status && event) complete(event, "load");
    return status;
  }
  std::vector<char> export_state() const {
    std::vector<char> bytes;
    zhost_tier_stream_args args{sizeof(args), nullptr, write_bytes, nullptr, &bytes};
    ok(storage_->export_state(self(), &args), "export_state");
    return bytes;
  }
  zhost_status* import_state(const std::vector<char>& bytes) const {
    Reader reader{&bytes, 0};
    zhost_tier_stream_args args{sizeof(args), nullptr, nullptr, read_bytes, &reader};
    return storage_->import_state(self(), &args);
  }

 private:
  struct Reader {
    const std::vector<char>* bytes;
    size_t at;
  };
  static int32_t write_bytes(void* user, const void* data, size_t len) {
    auto* out = static_cast<std::vector<char>*>(user);
    out->insert(out->end(), static_cast<const char*>(data), static_cast<const char*>(data) + len);
    return 0;
  }
  static int64_t read_bytes(void* user, void* data, size_t capacity) {
    auto* r = static_cast<Reader*>(user);
    const size_t n = std::min(capacity, r->bytes->size() - r->at);
    std::memcpy(data, r->bytes->data() + r->at, n);
    r->at += n;
    return static_cast<int64_t>(n);
  }
  // A host; with `storage` installed for tier_for(ZHOST_TIER_FOR_OPTIMIZER_STORAGE) before the instance exists.
  static std::unique_ptr<KitHost> with_storage(const CheckRun& run, KitStorage* storage) {
    auto host = run.host();
    if (storage) host->set_tier(ZHOST_TIER_FOR_OPTIMIZER_STORAGE, storage->ref());
    return host;
  }

  std::unique_ptr<KitHost> host_;
  Instance instance_;
  const zhost_storage_api* storage_;
  const zhost_optimizer_tier_api* optimizer_;
};

// A 1-D host tensor over `bytes` of dtype uint8 or float32.
struct Buffer {
  std::vector<char> storage;
  int64_t shape = 0;
  size_t offset = 0;  // misalignment of data within storage
  DLTensor view(DLDataType dtype) {
    DLTensor t{};
    t.data = storage.data() + offset;
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = 1;
    t.dtype = dtype;
    t.shape = &shape;
    return t;
  }
};

constexpr DLDataType kU8{kDLUInt, 8, 1};
constexpr DLDataType kF32{kDLFloat, 32, 1};

Buffer random_bytes(size_t bytes, size_t misalign, uint32_t seed) {
  Buffer b;
  b.storage.resize(bytes + misalign);
  b.offset = misalign;
  b.shape = static_cast<int64_t>(bytes);
  std::mt19937 rng(seed);
  for (auto& c : b.storage) c = static_cast<char>(rng());
  return b;
}

Buffer zeros_like(const Buffer& other, size_t misalign) {
  Buffer b;
  b.storage.assign(other.shape + misalign, 0);
  b.offset = misalign;
  b.shape = other.shape;
  return b;
}

bool same_bytes(const Buffer& a, const Buffer& b) {
  return a.shape == b.shape && std::memcmp(a.storage.data() + a.offset, b.storage.data() + b.offset, a.shape) == 0;
}

std::vector<float> random_floats(size_t n, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

DLTensor float_view(std::vector<float>& v, int64_t& shape, int64_t offset = 0, int64_t count = -1) {
  shape = count < 0 ? static_cast<int64_t>(v.size()) - offset : count;
  DLTensor t{};
  t.data = v.data() + offset;
  t.device = DLDevice{kDLCPU, 0};
  t.ndim = 1;
  t.dtype = kF32;
  t.shape = &shape;
  return t;
}

// ---- the optimizer of a computing tier against the reference ----------------------------------------

constexpr int64_t kGroup = 1001;  // not a multiple of any vector width
constexpr uint64_t kKey = 5;

zhost_optimizer_desc optimizer(zhost_optimizer_kind kind) {
  zhost_optimizer_desc d{};
  d.struct_size = sizeof(d);
  d.kind = kind;
  d.beta1 = kind == ZHOST_OPTIMIZER_LION ? 0.9 : 0.9;
  d.beta2 = kind == ZHOST_OPTIMIZER_LION ? 0.99 : 0.999;
  d.eps = 1e-8;
  d.weight_decay = 0.01;
  d.momentum = kind == ZHOST_OPTIMIZER_SGD ? 0.9 : 0.0;
  d.bias_correction = 1;
  return d;
}

const char* kind_name(zhost_optimizer_kind kind) {
  switch (kind) {
    case ZHOST_OPTIMIZER_ADAMW:
      return "AdamW";
    case ZHOST_OPTIMIZER_ADAM:
      return "Adam";
    case ZHOST_OPTIMIZER_SGD:
      return "SGD";
    case ZHOST_OPTIMIZER_LION:
      return "Lion";
  }
  return "?";
}

// Differences beyond the tolerance (0: bit for bit), as one line, or "".
std::string mismatch(const std::vector<float>& got, const std::vector<float>& want, double rtol) {
  for (size_t i = 0; i < want.size(); ++i) {
    const bool equal = rtol == 0 ? std::memcmp(&got[i], &want[i], 4) == 0
                                 : std::fabs(got[i] - want[i]) <= rtol * std::max(1e-30, std::fabs(double(want[i])));
    if (!equal)
      return "element " + std::to_string(i) + ": tier " + std::to_string(got[i]) + ", reference " +
             std::to_string(want[i]) + (rtol == 0 ? " (bit for bit)" : " (rtol " + std::to_string(rtol) + ")");
  }
  return "";
}

// Drives one group of a computing tier beside the reference.
class OptimizerRun {
 public:
  OptimizerRun(const Tier& tier, zhost_optimizer_kind kind, double rtol) : tier_(tier), rtol_(rtol) {
    ref_.optimizer = optimizer(kind);
    ref_.master = random_floats(kGroup, 0.1f, 2);
    ref_.exp_avg.assign(kGroup, 0.0f);
    ref_.exp_avg_sq.assign(kGroup, 0.0f);
  }

  // false when the tier refuses this optimizer kind with a clean CONFIG/UNSUPPORTED status.
  bool setup(std::string* refusal) {
    std::vector<float> initial = ref_.master;
    int64_t shape = 0;
    DLTensor view = float_view(initial, shape);
    zhost_tier_optimizer_setup setup{};
    setup.struct_size = sizeof(setup);
    setup.key = kKey;
    setup.optimizer = &ref_.optimizer;
    setup.initial_master = &view;
    zhost_status* status = tier_.opt().setup(tier_.self(), &setup);
    if (!status) return true;
    tier_.refused(status, ZHOST_OK, "optimizer_setup");  // an error status with a message
    *refusal = "refused";
    return false;
  }

  // One step: whole, or as range steps of `piece` elements. Compares the tier's params_out with the reference.
  //
  // `report` (docs/abi.md "Gradients in storage"): the gradients are reported finished in three uneven ranges
  // before the step, and read back through read_state("grad") where the tier moved them.
  void step(int64_t step, uint32_t seed, int64_t piece = 0, bool report = false) {
    const std::vector<float> grad = fill(seed);
    if (report) report_finished(grad);
    std::vector<float> out(kGroup, -1.0f);
    const double lr = 1e-2, grad_scale = 0.5;
    const int64_t chunk = piece > 0 ? piece : kGroup;
    for (int64_t offset = 0; offset < kGroup; offset += chunk) {
      const int64_t count = std::min(chunk, kGroup - offset);
      int64_t shape = 0;
      DLTensor out_view = float_view(out, shape, offset, count);
      zhost_tier_step_args args{};
      args.struct_size = sizeof(args);
      args.key = kKey;
      args.step = step;
      args.lr = lr;
      args.grad_scale = grad_scale;
      args.beta1 = ref_.optimizer.beta1;  // constant betas: what every 1.x tier computes alike
      args.beta2 = ref_.optimizer.beta2;
      args.params_out = &out_view;
      if (piece > 0) {
        args.offset = offset;
        tier_.ok(tier_.opt().step_range(tier_.self(), &args), "step_range");
      } else {
        tier_.ok(tier_.opt().step(tier_.self(), &args), "step");
      }
    }
    reference_step(ref_, grad, 0, kGroup, step, lr, grad_scale);
    ref_.momentum_started = true;
    const std::string diff = mismatch(out, ref_.master, rtol_);
    expect(diff.empty(), std::string(kind_name(ref_.optimizer.kind)) + " step " + std::to_string(step) +
                             (piece ? " in ranges" : "") + ": " + diff);
    expect_zero_accumulator("the step did not zero the accumulator");
  }

  // Gradients written and reported finished, then grad_zero: the accumulator reads zero
  // again, wherever the tier had moved them, and the next step starts from zeros.
  void zero_after_report(uint32_t seed) {
    report_finished(fill(seed));
    tier_.ok(tier_.optimizer_grad_zero(kKey), "optimizer_grad_zero");
    expect_zero_accumulator("optimizer_grad_zero left gradients in the accumulator");
    if (!tier_.opt().read_state) return;
    std::vector<float> back(kGroup, -1.0f);
    read_grad(back);
    for (float x : back) expect(x == 0.0f, "optimizer_read_state(\"grad\") after optimizer_grad_zero is not zero");
  }
  const ReferenceGroup& reference() const { return ref_; }
  ReferenceGroup& reference() { return ref_; }

 private:
  float* accumulator() const {
    DLTensor acc{};
    tier_.ok(tier_.optimizer_grad(kKey, &acc), "optimizer_grad");
    expect(acc.ndim == 1 && acc.shape[0] == kGroup && acc.dtype.code == kDLFloat && acc.dtype.bits == 32 &&
               (acc.device.device_type == kDLCPU || acc.device.device_type == kDLCUDAHost),
           "optimizer_grad is not a 1-D fp32 host view of the group's length");
    return reinterpret_cast<float*>(static_cast<char*>(acc.data) + acc.byte_offset);
  }
  void expect_zero_accumulator(const char* what) const {
    const float* values = accumulator();
    for (int64_t i = 0; i < kGroup; ++i) expect(values[i] == 0.0f, what);
  }
  // Random gradients written into the (zero) accumulator, as a partition adds them.
  std::vector<float> fill(uint32_t seed) const {
    const std::vector<float> grad = random_floats(kGroup, 1.0f, seed);
    expect_zero_accumulator("the accumulator is not zero after setup or the previous step");
    std::memcpy(accumulator(), grad.data(), grad.size() * 4);
    return grad;
  }
  // Elements [offset, offset + into.size()) of the accumulator.
  void read_grad(std::vector<float>& into, int64_t offset = 0) const {
    int64_t shape = 0;
    DLTensor view = float_view(into, shape);
    zhost_tier_state_args args{};
    args.struct_size = sizeof(args);
    args.key = kKey;
    args.state = "grad";
    args.offset = offset;
    args.data = &view;
    tier_.ok(tier_.opt().read_state(tier_.self(), &args), "optimizer_read_state(\"grad\")");
  }
  void report_finished(const std::vector<float>& grad) const {
    bool moved = false;
    for (const auto& [offset, count] : {std::pair<int64_t, int64_t>{500, 501}, {0, 17}, {17, 483}}) {
      int32_t range_moved = -1;
      tier_.ok(tier_.optimizer_grad_done(kKey, offset, count, &range_moved), "optimizer_grad_done");
      expect(range_moved == 0 || range_moved == 1, "optimizer_grad_done left *moved unset");
      moved = moved || range_moved == 1;
    }
    if (!moved || !tier_.opt().read_state) return;
    std::vector<float> back(kGroup, -1.0f);
    read_grad(back);
    expect(back == grad, "optimizer_read_state(\"grad\") does not return the finished gradients");
    std::vector<float> part(451, -1.0f);  // a range that starts and ends inside the tier's chunks, if it has any
    read_grad(part, 37);
    expect(std::equal(part.begin(), part.end(), grad.begin() + 37),
           "optimizer_read_state(\"grad\") of a range inside the group does not return its finished gradients");
  }

  const Tier& tier_;
  double rtol_;
  ReferenceGroup ref_;
};

// Each optimizer kind against the reference; `over_storage`: with the kit's storage tier under the tier.
void check_optimizer_kinds(const CheckRun& run, bool over_storage) {
  for (zhost_optimizer_kind kind :
       {ZHOST_OPTIMIZER_ADAMW, ZHOST_OPTIMIZER_ADAM, ZHOST_OPTIMIZER_SGD, ZHOST_OPTIMIZER_LION}) {
    const std::string name = std::string("optimizer: ") + kind_name(kind) + " equals the reference" +
                             (over_storage ? ", states in the kit's storage tier" : "");
    run.check(name, [&] {
      KitStorage kit_storage;
      KitStorage* storage = over_storage ? &kit_storage : nullptr;
      const Tier tier(run, storage);
      OptimizerRun group(tier, kind, run.options.rtol);
      std::string refusal;
      if (!group.setup(&refusal))
        throw Skipped(std::string("the tier refuses ") + kind_name(kind) + " with a clean status");
      if (storage) expect(storage->bytes() > 0, "optimizer_setup put nothing into the storage tier");
      group.step(1, 11);
      group.step(2, 12);
      if (tier.opt().step_range) {
        group.step(3, 13, 97);
        group.step(4, 14, 101);
      }
      group.step(5, 15);
      expect(!tier.opt().grad_done == !tier.opt().grad_zero,
             "grad_done and grad_zero come as a pair: set both or neither");
      if (tier.opt().grad_done && tier.opt().grad_zero) {
        group.step(6, 16, 0, /*report=*/true);
        group.zero_after_report(17);  // a skipped step: the reference does not move
        group.step(7, 18, tier.opt().step_range ? 97 : 0, /*report=*/true);
      }
      if (storage) expect(storage->loads() > 0, "the steps loaded nothing from the storage tier");
      {
        tier.ok(tier.optimizer_drop(kKey), "optimizer_drop");
        if (storage) expect(storage->buffers() == 0, "optimizer_drop left the group's buffers in the storage tier");
      }
    });
  }
}

void check_computing(const CheckRun& run, uint64_t flags) {
  const zhost_optimizer_tier_api& api = *run.plugin.api().optimizer;
  run.check("computing: the required optimizer functions are set", [&] {
    expect(api.setup && api.grad && api.step && api.drop && api.memory,
           "the optimizer table lacks setup, grad, step, drop or memory");
  });
  if (!(api.setup && api.grad && api.step && api.drop && api.memory)) return;
  check_optimizer_kinds(run, /*over_storage=*/false);

  run.check("optimizer: bad calls fail cleanly, the group still steps after", [&] {
    Tier tier(run);
    OptimizerRun group(tier, ZHOST_OPTIMIZER_ADAMW, run.options.rtol);
    std::string refusal;
    if (!group.setup(&refusal)) throw Skipped("the tier refuses AdamW");
    zhost_tier_step_args args{};
    args.struct_size = sizeof(args);
    args.key = kKey + 100;
    args.step = 1;
    args.lr = 1e-2;
    args.grad_scale = 1;
    args.beta1 = 0.9;
    args.beta2 = 0.999;
    tier.refused(api.step(tier.self(), &args), ZHOST_ERR_INVALID_ARGUMENT, "a step of an unknown group");
    std::vector<float> small(10);
    int64_t shape = 0;
    DLTensor wrong = float_view(small, shape);
    args.key = kKey;
    args.params_out = &wrong;
    tier.refused(api.step(tier.self(), &args), ZHOST_ERR_INVALID_ARGUMENT, "a step with params_out of the wrong size");
    if (api.step_range) {
      args.offset = kGroup - 5;
      tier.refused(api.step_range(tier.self(), &args), ZHOST_ERR_INVALID_ARGUMENT, "a range step past the group's end");
    }
    DLTensor acc{};
    tier.refused(tier.optimizer_grad(kKey + 100, &acc), ZHOST_ERR_INVALID_ARGUMENT,
                 "optimizer_grad of an unknown group");
    group.step(1, 21);  // the refused calls changed nothing
  });

  if (run.plugin.api().storage)
    run.check("key namespaces: buffer keys and group keys are apart", [&] {
      Tier tier(run);
      OptimizerRun group(tier, ZHOST_OPTIMIZER_ADAMW, run.options.rtol);
      std::string refusal;
      if (!group.setup(&refusal)) throw Skipped("the tier refuses AdamW");
      Buffer b = random_bytes(64, 0, 7), back = zeros_like(b, 0);
      tier.store(kKey, b.view(kU8));  // buffer 5 beside group 5
      group.step(1, 31);
      tier.load(kKey, back.view(kU8));
      expect(same_bytes(b, back), "a step of group 5 changed buffer 5");
      tier.ok(tier.drop(kKey), "drop of buffer 5");
      group.step(2, 32);  // drop() touched the buffer only: the group's states are intact
      tier.ok(tier.optimizer_drop(kKey), "optimizer_drop");
      DLTensor acc{};
      tier.refused(tier.optimizer_grad(kKey, &acc), ZHOST_ERR_INVALID_ARGUMENT, "optimizer_grad of a dropped group");
      tier.ok(tier.optimizer_drop(kKey), "optimizer_drop of an unknown group");
    });

  if (run.plugin.api().storage)
    run.check("export/import: a fresh instance continues the groups bit for bit", [&] {
      Tier first(run), second(run);
      OptimizerRun a(first, ZHOST_OPTIMIZER_ADAMW, 0);
      std::string refusal;
      if (!a.setup(&refusal)) throw Skipped("the tier refuses AdamW");
      a.step(1, 41);
      a.step(2, 42);
      first.ok(second.import_state(first.export_state()), "import_state");
      OptimizerRun b(second, ZHOST_OPTIMIZER_ADAMW, 0);
      b.reference() = a.reference();  // the imported group continues from the exported one
      a.step(3, 43);
      b.step(3, 43);
    });

  if (!(flags & ZHOST_PLUGIN_FLAG_TIER_USES_STORAGE)) {
    run.report.not_covered.push_back("composition: the tier does not declare ZHOST_PLUGIN_FLAG_TIER_USES_STORAGE");
    return;
  }
  check_optimizer_kinds(run, /*over_storage=*/true);
}

}  // namespace

void check_tier(const CheckRun& run) {
  const zhost_plugin_api& api = run.plugin.api();
  const uint64_t flags = run.plugin.descriptor().flags;
  const bool stores = flags & ZHOST_PLUGIN_FLAG_TIER_STORES, computes = flags & ZHOST_PLUGIN_FLAG_TIER_COMPUTES;
  const zhost_storage_api* table = api.storage;

  run.check("roles: declared, and matching the tables", [&] {
    expect(stores || computes, "the tier declares no role (ZHOST_PLUGIN_FLAG_TIER_STORES / _COMPUTES)");
    expect(stores == (api.storage != nullptr), stores ? "declares TIER_STORES but its storage table is NULL"
                                                      : "fills a storage table but does not declare TIER_STORES");
    expect(computes == (api.optimizer != nullptr), computes
                                                       ? "declares TIER_COMPUTES but its optimizer table is NULL"
                                                       : "fills an optimizer table but does not declare TIER_COMPUTES");
    if (table)
      expect(table->store && table->load && table->wait && table->test && table->drop && table->export_state &&
                 table->import_state && table->memory,
             "store, load, wait, test, drop, export_state, import_state and memory are required");
    expect(!(flags & ZHOST_PLUGIN_FLAG_TIER_USES_STORAGE) || computes,
           "declares TIER_USES_STORAGE without TIER_COMPUTES");
  });
  if (stores != (table != nullptr) || computes != (api.optimizer != nullptr)) return;

  if (stores) {
    run.check("storage: round trips of odd sizes and alignments", [&] {
      Tier tier(run);
      uint64_t key = 1;
      for (size_t bytes : {size_t{1}, size_t{3}, size_t{7}, size_t{64}, size_t{1001}, size_t{4097}, size_t{65537}})
        for (size_t misalign : {size_t{0}, size_t{1}, size_t{3}}) {
          Buffer b = random_bytes(bytes, misalign, static_cast<uint32_t>(key)),
                 back = zeros_like(b, (misalign + 2) % 4);
          tier.store(key, b.view(kU8));
          tier.load(key, back.view(kU8));
          expect(same_bytes(b, back),
                 std::to_string(bytes) + " bytes at misalignment " + std::to_string(misalign) + " came back different");
          ++key;
        }
      std::vector<float> floats = random_floats(333, 1.0f, 9), back(333);
      int64_t s1 = 0, s2 = 0;
      tier.store(1ull << 62, float_view(floats, s1));  // keys are 64-bit
      tier.load(1ull << 62, float_view(back, s2));
      expect(std::memcmp(floats.data(), back.data(), floats.size() * 4) == 0,
             "fp32 buffer under a high key came back different");
    });

    run.check("storage: overwrite, drop, and errors for bad calls", [&] {
      Tier tier(run);
      Buffer small = random_bytes(10, 0, 1), large = random_bytes(100, 0, 2);
      tier.store(9, small.view(kU8));
      tier.store(9, large.view(kU8));  // a store replaces the buffer, size included
      Buffer back = zeros_like(large, 0), wrong = zeros_like(small, 0);
      tier.load(9, back.view(kU8));
      expect(same_bytes(large, back), "an overwritten buffer came back different");
      tier.refused(tier.try_load(9, wrong.view(kU8)), ZHOST_ERR_INVALID_ARGUMENT, "a load of the wrong size");
      tier.refused(tier.try_load(12345, back.view(kU8)), ZHOST_ERR_INVALID_ARGUMENT, "a load of an unknown key");
      tier.load(9, back.view(kU8));  // calls after failures work
      expect(same_bytes(large, back), "a buffer changed after refused calls");
      tier.ok(tier.drop(9), "drop");
      tier.refused(tier.try_load(9, back.view(kU8)), ZHOST_ERR_INVALID_ARGUMENT, "a load of a dropped key");
      tier.ok(tier.drop(9), "drop of an unknown key");
      tier.store(9, small.view(kU8));  // the key is usable again
    });

    run.check("events: test and wait", [&] {
      Tier tier(run);
      int32_t done = -1;
      tier.ok(tier.test(nullptr, &done), "test of a NULL event");
      expect(done == 1, "test of a NULL event must report done");
      Buffer b = random_bytes(4096, 0, 3), back = zeros_like(b, 0);
      for (int round = 0; round < 4; ++round) {  // alternate: completion by test, by wait
        zhost_tier_event* event = nullptr;
        DLTensor view = b.view(kU8);  // borrowed until the event completes
        tier.ok(tier.io(true, 77, view, &event), "store");
        if (round % 2)
          tier.complete(event, "store");
        else if (event)
          tier.ok(tier.wait(event), "wait");
        tier.load(77, back.view(kU8));
        expect(same_bytes(b, back), "data stored under an event came back different");
      }
    });

    run.check("export/import: a fresh instance holds the same buffers", [&] {
      Tier first(run), second(run);
      std::vector<Buffer> stored;
      for (uint64_t key = 0; key < 5; ++key) {
        stored.push_back(random_bytes(17 * (key + 1), 0, static_cast<uint32_t>(key + 100)));
        first.store(key * 1000003, stored.back().view(kU8));
      }
      const std::vector<char> state = first.export_state();
      std::vector<char> truncated(state.begin(), state.begin() + static_cast<long>(state.size() / 2));
      Tier broken(run);
      broken.refused(broken.import_state(truncated), ZHOST_OK, "import of a truncated state");
      second.ok(second.import_state(state), "import_state");
      for (uint64_t key = 0; key < 5; ++key) {
        Buffer back = zeros_like(stored[key], 0);
        second.load(key * 1000003, back.view(kU8));
        expect(same_bytes(stored[key], back), "buffer " + std::to_string(key) + " differs after import");
      }
      Buffer b = random_bytes(8, 0, 1);
      broken.store(1, b.view(kU8));  // an instance whose import failed still serves calls
    });
  }

  run.check("memory: reports without error", [&] {
    Tier tier(run);
    zhost_tier_memory memory{};
    memory.struct_size = sizeof(memory);
    tier.ok(table ? table->memory(tier.self(), &memory) : api.optimizer->memory(tier.self(), &memory), "memory");
  });

  if (computes) check_computing(run, flags);
  run.report.not_covered.push_back("device tensors and the host's copy services (the kit has no device)");
}

}  // namespace zhost::conformance
