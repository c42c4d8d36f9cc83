// host/config/deepspeed/deepspeed_import_internal.hpp: the machinery the DeepSpeed mapping is written with (shared by
// deepspeed_import.cpp, the machinery and top-level keys, and deepspeed_sections.cpp, the tables).
#pragma once

#include <optional>
#include <set>
#include <string>
#include <vector>

#include "host/config/deepspeed/deepspeed_import.hpp"

namespace zhost::config::ds {

using nlohmann::json;

// HF Trainer's placeholder, filled in by the Trainer from its own arguments.
inline bool is_auto(const json* value) { return value && value->is_string() && value->get<std::string>() == "auto"; }

class Importer;

// One JSON object being read. Every key a handler asks about is "known" (for suggestions); the keys no
// handler took are reported by finish() as unknown, with a suggestion among this table's keys.
class Section {
 public:
  Section(Importer& importer, const json* object, std::string ds_path, std::string pointer);

  // The value, or nullptr when absent; marks the key read.
  const json* take(const std::string& key);
  bool has(const std::string& key) const { return object_ && object_->contains(key); }
  std::string path(const std::string& key) const;
  TextPosition at(const std::string& key) const;
  std::string shown(const std::string& key) const;  // "zero_optimization.stage = 2"

  // HF Trainer's default for a key ("auto" left unfilled takes it): its argument and the value, a TOML literal.
  struct HfDefault {
    std::string argument;  // "--per_device_train_batch_size"
    std::string value;     // "8"
  };
  // Copies the value to a zhost key. "auto" is filled by zhost's arguments, else by `hf` (HF Trainer's
  // default), else refused with `auto_hint` (what to write); Note [HF's "auto"].
  void map(const std::string& key, const std::string& zhost_path, const std::string& auto_hint = "",
           const HfDefault& hf = {});
  // Accepted with a note: it cannot change anything here.
  void note(const std::string& key, const std::string& reason);
  // Accepted with a note when the value is `inert` (DeepSpeed's default, or a value with no effect here;
  // null is DeepSpeed's default too), refused with `refusal` (why; what to do) otherwise.
  void inert(const std::string& key, const json& inert_value, const std::string& refusal);
  void refuse(const std::string& key, const std::string& reason);
  // A nested table (taken); an empty Section when absent, refused when not an object.
  Section sub(const std::string& key);
  // Every remaining key: noted with `reason` (a whole table of a mechanism zhost does differently).
  void note_rest(const std::string& reason);
  void finish();

  const json* object() const { return object_; }
  const std::string& ds_path() const { return ds_path_; }

 private:
  Importer& importer_;
  const json* object_;
  std::string ds_path_;
  std::string pointer_;
  std::vector<std::string> known_;
  std::set<std::string> taken_;
};

class Importer {
 public:
  Importer(const JsonConfig& json, const ImportOverrides& overrides) : json_(json), overrides_(overrides) {}
  DeepSpeedImport run();
  const ImportOverrides& overrides() const { return overrides_; }

  // Sets a zhost key from the DeepSpeed key at `ds_path`; a key set twice is refused.
  void set(const std::string& zhost_path, const json& value, const std::string& ds_path, TextPosition at,
           const std::string& warning = "");
  ImportRecord& record(ImportRecord::Kind kind, const std::string& ds_path, TextPosition at,
                       const std::string& zhost_path, const std::string& text);
  TextPosition position(const std::string& pointer) const;
  bool is_set(const std::string& zhost_path) const;
  bool is_true(const std::string& zhost_path) const;                              // set to the boolean true
  bool is_string(const std::string& zhost_path, const std::string& value) const;  // set to this string

 private:
  void top_level(Section& root);
  void batch_sizes(Section& root);
  void precision(Section& root);
  void zhost_table(Section& root);
  void insert_zhost_node(const json& value, const std::string& zhost_path, const std::string& pointer);

  const JsonConfig& json_;
  const ImportOverrides& overrides_;
  DeepSpeedImport out_;
};

// deepspeed_sections.cpp: the tables.
void import_zero(Importer& importer, Section& root);
void import_optimizer(Importer& importer, Section& root);
void import_scheduler(Importer& importer, Section& root);
void import_features(Importer& importer, Section& root);  // monitoring, profiling, and features zhost lacks

}  // namespace zhost::config::ds
