// host/config/deepspeed/deepspeed_import.hpp: DeepSpeed's ds_config.json mapped onto zhost's config tree (the same
// tree a TOML file gives), key by key: each DeepSpeed key is mapped, accepted with a note (it cannot
// change anything here), or refused with why and what to write. Note [DeepSpeed JSON] in docs/config.md
// ("From DeepSpeed JSON") is the mapping table. Internal to host/config (it holds toml++ nodes).
#pragma once

#include <toml++/toml.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "host/config/parse/json_reader.hpp"

namespace zhost::config {

// What became of one DeepSpeed key.
struct ImportRecord {
  // Auto: HF Trainer's "auto" on a key zhost cannot derive; the trainer's arguments fill it, and zhost's are
  // --set, a companion TOML or the "zhost" table (Note [HF's "auto"] in docs/config.md). Document decides
  // once every source is in: a note naming the value's source, or a refusal (`text`) when none gives it.
  // Default: a key the file does not write whose DeepSpeed default differs from zhost's (Note [DeepSpeed's
  // clipping default], Note [DeepSpeed's overlap_comm default]); zhost's arguments fill it as they fill "auto",
  // else DeepSpeed's default (`ds_default`), noted with `text`.
  enum class Kind { Mapped, Noted, Refused, Auto, Default };
  Kind kind = Kind::Mapped;
  std::string ds_path;     // "zero_optimization.offload_optimizer.device"
  TextPosition at;         // the key's place in the file
  std::string zhost_path;  // Mapped: the zhost key it sets ("zero.offload_optimizer.device")
  std::string text;        // Noted, Refused, Auto, Default: the one-line reason (and what to do); Mapped: a
                           // warning or ""
  // Auto: HF Trainer's default for the key, which fills an "auto" none of zhost's arguments gives (Note [HF's
  // "auto"]): the TOML literal ("8", "[0.9, 0.999]") and the Trainer's argument ("--per_device_train_batch_size").
  // Empty for a key the Trainer has no default for: such an "auto" is refused (`text`).
  std::string hf_default;
  std::string hf_argument;
  std::string ds_default;  // Default: DeepSpeed's value for the unwritten key, a TOML literal ("1.0")
};

struct DeepSpeedImport {
  toml::table root;                               // zhost's keys
  std::map<std::string, TextPosition> positions;  // zhost path (keys and tables) -> the JSON key's place
  std::vector<ImportRecord> records;              // in file order
};

// What the command line (--set) puts over the JSON's values where the mapping depends on them: DeepSpeed
// reads offload_param only at stage 3, the NVMe knobs and the aio table only when something goes to NVMe,
// and fp16's knobs only when fp16 is on. Unset members: the JSON's own values decide.
struct ImportOverrides {
  std::optional<int64_t> stage;                 // zero.stage
  std::optional<std::string> optimizer_device;  // zero.offload_optimizer.device
  std::optional<std::string> param_device;      // zero.offload_param.device
  std::optional<bool> fp16_enabled;             // fp16.enabled: DeepSpeed reads fp16's other keys only when on
};

// Maps the parsed JSON. The "zhost" table, when present, holds zhost's own keys (model, data, steps, ...)
// as they are written in TOML; they join the tree as they are.
DeepSpeedImport import_deepspeed(const JsonConfig& json, const ImportOverrides& overrides = {});

}  // namespace zhost::config
