// host/config/deepspeed/deepspeed_import.cpp: the mapping's machinery (sections, values, records) and DeepSpeed's
// top-level keys: batch sizes (with HF Trainer's "auto"), clipping, precision, the "zhost" table.
#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "host/config/deepspeed/deepspeed_import_internal.hpp"
#include "host/config/parse/json_reader.hpp"
#include "host/config/parse/key_path.hpp"
#include "host/core/text.hpp"

namespace zhost::config::ds {
namespace {

// Writes a JSON scalar or array of scalars as table[key]; false for anything else (null, objects, nesting).
bool to_toml_value(const json& value, toml::table& table, const std::string& key) {
  switch (value.type()) {
    case json::value_t::boolean:
      table.insert_or_assign(key, value.get<bool>());
      return true;
    case json::value_t::number_integer:
      table.insert_or_assign(key, value.get<int64_t>());
      return true;
    case json::value_t::number_unsigned: {
      const auto number = value.get<uint64_t>();
      if (number <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        table.insert_or_assign(key, static_cast<int64_t>(number));
      } else {
        table.insert_or_assign(key, static_cast<double>(number));
      }
      return true;
    }
    case json::value_t::number_float:
      table.insert_or_assign(key, value.get<double>());
      return true;
    case json::value_t::string:
      table.insert_or_assign(key, value.get<std::string>());
      return true;
    case json::value_t::array: {
      toml::array array;
      for (const auto& item : value) {
        toml::table holder;
        if (item.is_array() || item.is_object() || !to_toml_value(item, holder, "v")) return false;
        array.push_back(*holder.get("v"));
      }
      table.insert_or_assign(key, std::move(array));
      return true;
    }
    default:
      return false;
  }
}

std::string shown_value(const json& value) { return text::excerpt(value.dump(), 60); }

}  // namespace

// ---- Section ----

Section::Section(Importer& importer, const json* object, std::string ds_path, std::string pointer)
    : importer_(importer), object_(object), ds_path_(std::move(ds_path)), pointer_(std::move(pointer)) {}

const json* Section::take(const std::string& key) {
  if (std::find(known_.begin(), known_.end(), key) == known_.end()) known_.push_back(key);
  if (!has(key)) return nullptr;
  taken_.insert(key);
  return &(*object_)[key];
}

std::string Section::path(const std::string& key) const { return join_path(ds_path_, key); }

TextPosition Section::at(const std::string& key) const {
  return importer_.position(pointer_ + "/" + escape_json_pointer_token(key));
}

std::string Section::shown(const std::string& key) const {
  const std::string name = text::excerpt(path(key), 80);
  return has(key) ? fmt::format("{} = {}", name, shown_value((*object_)[key])) : name;
}

void Section::map(const std::string& key, const std::string& zhost_path, const std::string& auto_hint,
                  const HfDefault& hf) {
  const json* value = take(key);
  if (!value) return;
  if (value->is_null()) {
    importer_.record(
        ImportRecord::Kind::Noted, path(key), at(key), zhost_path,
        fmt::format("{}: null is DeepSpeed's default; zhost's default applies ({})", path(key), zhost_path));
    return;
  }
  if (is_auto(value)) {
    take(key);
    ImportRecord& record =
        importer_.record(ImportRecord::Kind::Auto, path(key), at(key), zhost_path,
                         fmt::format("{}: \"auto\" is filled in from the trainer's arguments, and none gives it "
                                     "here; give it with --set {}=VALUE, or write it in the file: {}",
                                     shown(key), zhost_path, auto_hint.empty() ? "the value" : auto_hint));
    record.hf_default = hf.value;
    record.hf_argument = hf.argument;
    return;
  }
  importer_.set(zhost_path, *value, path(key), at(key));
}

void Section::note(const std::string& key, const std::string& reason) {
  if (!take(key)) return;
  importer_.record(ImportRecord::Kind::Noted, path(key), at(key), "", fmt::format("{}: {}", shown(key), reason));
}

void Section::inert(const std::string& key, const json& inert_value, const std::string& refusal) {
  const json* value = take(key);
  if (!value) return;
  if (value->is_null() || *value == inert_value ||
      (value->is_number() && inert_value.is_number() && value->get<double>() == inert_value.get<double>())) {
    importer_.record(ImportRecord::Kind::Noted, path(key), at(key), "",
                     fmt::format("{}: DeepSpeed's default ({}), nothing to change", shown(key), inert_value.dump()));
    return;
  }
  refuse(key, refusal);
}

void Section::refuse(const std::string& key, const std::string& reason) {
  take(key);
  importer_.record(ImportRecord::Kind::Refused, path(key), at(key), "", fmt::format("{}: {}", shown(key), reason));
}

Section Section::sub(const std::string& key) {
  const json* value = take(key);
  if (value && !value->is_object()) {
    refuse(key, "DeepSpeed reads a table ({...}) here; write the table");
    value = nullptr;
  }
  return Section(importer_, value, path(key), pointer_ + "/" + escape_json_pointer_token(key));
}

void Section::note_rest(const std::string& reason) {
  if (!object_) return;
  for (const auto& [key, value] : object_->items()) {
    if (!taken_.count(key)) note(key, reason);
  }
}

void Section::finish() {
  if (!object_) return;
  for (const auto& [key, value] : object_->items()) {
    if (taken_.count(key)) continue;
    taken_.insert(key);
    const std::string match = text::closest_match(key, known_);
    if (ds_path_.empty() && match.empty() && key != "zhost") {
      // DeepSpeed reads its top-level keys by name and ignores the rest; a misspelling is refused below.
      importer_.record(ImportRecord::Kind::Noted, path(key), at(key), "",
                       fmt::format("'{}' is not a DeepSpeed key: DeepSpeed ignores it, and so does zhost (zhost's "
                                   "own settings go in the \"zhost\" table)",
                                   text::excerpt(key)));
      continue;
    }
    const std::string where = ds_path_.empty() ? "at the top level" : "in " + ds_path_;
    importer_.record(
        ImportRecord::Kind::Refused, path(key), at(key), "",
        match.empty()
            ? fmt::format("'{}' is not a DeepSpeed key {} (zhost's own settings go in the \"zhost\" table); fix or "
                          "remove it",
                          text::excerpt(path(key)), where)
            : fmt::format("'{}' is not a DeepSpeed key {}; did you mean '{}'?", text::excerpt(path(key)), where,
                          path(match)));
  }
}

// ---- Importer ----

TextPosition Importer::position(const std::string& pointer) const {
  auto found = json_.key_positions.find(pointer);
  return found == json_.key_positions.end() ? TextPosition{} : found->second;
}

bool Importer::is_set(const std::string& zhost_path) const { return out_.root.at_path(zhost_path).node() != nullptr; }

bool Importer::is_true(const std::string& zhost_path) const {
  return out_.root.at_path(zhost_path).value<bool>().value_or(false);
}

bool Importer::is_string(const std::string& zhost_path, const std::string& value) const {
  return out_.root.at_path(zhost_path).value<std::string>() == value;
}

ImportRecord& Importer::record(ImportRecord::Kind kind, const std::string& ds_path, TextPosition at,
                               const std::string& zhost_path, const std::string& text) {
  out_.records.push_back(ImportRecord{kind, ds_path, at, zhost_path, text, "", "", ""});
  return out_.records.back();
}

void Importer::set(const std::string& zhost_path, const json& value, const std::string& ds_path, TextPosition at,
                   const std::string& warning) {
  if (is_set(zhost_path)) {
    record(ImportRecord::Kind::Refused, ds_path, at, zhost_path,
           fmt::format("{} sets {}, which another key of this file sets too; keep one of them", ds_path, zhost_path));
    return;
  }
  toml::table* table = &out_.root;
  std::string table_path;
  const std::vector<std::string> segments = split_path(zhost_path);
  for (size_t i = 0; i + 1 < segments.size(); ++i) {
    table_path = join_path(table_path, segments[i]);
    toml::node* node = table->get(segments[i]);
    if (!node) node = &table->insert(segments[i], toml::table{}).first->second;
    table = node->as_table();
    out_.positions.emplace(table_path, at);
  }
  if (!to_toml_value(value, *table, segments.back())) {
    record(ImportRecord::Kind::Refused, ds_path, at, zhost_path,
           fmt::format("{} = {}: {} takes a number, string, boolean or list of them; write one", ds_path,
                       shown_value(value), zhost_path));
    return;
  }
  out_.positions[zhost_path] = at;
  record(ImportRecord::Kind::Mapped, ds_path, at, zhost_path, warning);
}

void Importer::insert_zhost_node(const json& value, const std::string& zhost_path, const std::string& pointer) {
  const TextPosition at = position(pointer);
  if (value.is_object()) {
    out_.positions.emplace(zhost_path, at);
    for (const auto& [key, item] : value.items()) {
      if (!is_valid_path(key)) {
        record(ImportRecord::Kind::Refused, "zhost." + join_path(zhost_path, key),
               position(pointer + "/" + escape_json_pointer_token(key)), "",
               fmt::format("'{}' is not a key name (letters, digits, _ and -); fix it", text::excerpt(key)));
        continue;
      }
      insert_zhost_node(item, join_path(zhost_path, key), pointer + "/" + escape_json_pointer_token(key));
    }
    if (value.empty() && !is_set(zhost_path)) {
      // An empty table: kept, so that an unknown table is still reported.
      toml::table* table = &out_.root;
      for (const auto& segment : split_path(zhost_path)) {
        toml::node* node = table->get(segment);
        if (!node) node = &table->insert(segment, toml::table{}).first->second;
        if (!node->is_table()) return;
        table = node->as_table();
      }
    }
    return;
  }
  set(zhost_path, value, "zhost." + zhost_path, at);
}

void Importer::zhost_table(Section& root) {
  const json* value = root.take("zhost");
  if (!value) return;
  if (!value->is_object()) {
    root.refuse("zhost", "the \"zhost\" table holds zhost's own settings as a table, e.g. {\"steps\": 100}");
    return;
  }
  insert_zhost_node(*value, "", "/zhost");
}

void Importer::batch_sizes(Section& root) {
  const json* train = root.object() && root.has("train_batch_size") ? &(*root.object())["train_batch_size"] : nullptr;
  const json* micro =
      root.has("train_micro_batch_size_per_gpu") ? &(*root.object())["train_micro_batch_size_per_gpu"] : nullptr;
  const json* accumulation =
      root.has("gradient_accumulation_steps") ? &(*root.object())["gradient_accumulation_steps"] : nullptr;
  auto number = [](const json* value) { return value && value->is_number(); };
  auto derived = [&](const std::string& key, const std::string& how) {
    root.take(key);
    record(ImportRecord::Kind::Noted, key, root.at(key), "",
           fmt::format("{} = \"auto\": derived as {} (HF Trainer's own arithmetic)", key, how));
  };
  if (is_auto(train)) {
    derived("train_batch_size", "train_micro_batch_size_per_gpu * gradient_accumulation_steps * world size");
  } else {
    root.map("train_batch_size", "train_batch_size");
  }
  if (is_auto(micro) && number(train) && !is_auto(accumulation)) {
    derived("train_micro_batch_size_per_gpu", "train_batch_size / (gradient_accumulation_steps * world size)");
  } else {
    root.map("train_micro_batch_size_per_gpu", "train_micro_batch_size_per_gpu",
             "the per-rank batch (HF Trainer's --per_device_train_batch_size, default 8; or the one DeepSpeed's "
             "autotuner would pick: zhost has no autotuner)",
             {"--per_device_train_batch_size", "8"});
  }
  if (is_auto(accumulation) && number(train) && number(micro)) {
    derived("gradient_accumulation_steps", "train_batch_size / (train_micro_batch_size_per_gpu * world size)");
  } else {
    root.map("gradient_accumulation_steps", "gradient_accumulation_steps",
             "HF Trainer's --gradient_accumulation_steps (default 1)", {"--gradient_accumulation_steps", "1"});
  }
}

void Importer::precision(Section& root) {
  const char* auto_hint = "true when HF Trainer runs with --{}, else false";
  // fp16: the other keys matter only when it is enabled (DeepSpeed ignores them otherwise, and so does zhost).
  Section fp16 = root.sub("fp16");
  const json* fp16_on = fp16.take("enabled");
  if (fp16_on) fp16.map("enabled", "fp16.enabled", fmt::format(fmt::runtime(auto_hint), "fp16"), {"--fp16", "false"});
  bool fp16_enabled = fp16_on && fp16_on->is_boolean() && fp16_on->get<bool>();
  if (is_auto(fp16_on) && is_set("fp16.enabled")) {  // "auto" filled by the "zhost" table
    const toml::node* zhost_value = out_.root.at_path("fp16.enabled").node();
    fp16_enabled = zhost_value->is_boolean() && zhost_value->as_boolean()->get();
  }
  fp16_enabled = overrides_.fp16_enabled.value_or(fp16_enabled);
  for (const char* key : {"loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis",
                          "consecutive_hysteresis", "min_loss_scale"}) {
    if (fp16_enabled)
      fp16.map(key, std::string("fp16.") + key);
    else
      fp16.note(key, "fp16 is not enabled, so DeepSpeed ignores it, and zhost too");
  }
  // Note [fp16.auto_cast]: DeepSpeed's forward casts the floating-point tensors among the model's inputs to
  // fp16 (engine._cast_inputs_half) when auto_cast is true, whether fp16 is enabled or not, and leaves integer
  // tensors as they are. zhost's models (mlp, gpt, llama, hf) take one input, the batch's token ids (int64,
  // data::Batch), so the cast has nothing to act on: noted, with either value. A model with floating-point
  // inputs would have to refuse auto_cast = true again.
  fp16.note("auto_cast",
            "DeepSpeed casts the model's floating-point inputs to fp16; zhost's models take token ids (int64), "
            "which it leaves as they are, so it changes nothing");
  fp16.map("fp16_master_weights_and_grads", "fp16.master_weights_and_grads");
  fp16.finish();

  // bf16, or its old name bfloat16.
  const bool old_name = root.has("bfloat16") && !root.has("bf16");
  if (root.has("bfloat16") && root.has("bf16")) {
    root.refuse("bfloat16", "both bf16 and its old name bfloat16 are written; keep bf16");
  }
  Section bf16 = root.sub(old_name ? "bfloat16" : "bf16");
  if (old_name)
    root.take("bf16");  // known, for suggestions
  else
    root.take("bfloat16");
  const json* bf16_on = bf16.take("enabled");
  if (bf16_on) bf16.map("enabled", "bf16.enabled", fmt::format(fmt::runtime(auto_hint), "bf16"), {"--bf16", "false"});
  if (old_name) {
    record(ImportRecord::Kind::Noted, "bfloat16", root.at("bfloat16"), "bf16",
           "bfloat16 is DeepSpeed's deprecated name of bf16; read as bf16");
  }
  bf16.inert("immediate_grad_update", false,
             "accumulating each micro-batch's bf16 gradients into fp32 at once is DeepSpeed's bf16 optimizer's "
             "mode, not zhost's (the sums would round differently); set it to false");
  bf16.inert("check_grad_overflow", true,
             "zhost checks bf16 gradients for inf/nan as DeepSpeed's default does; set it to true");
  bf16.map("bf16_master_weights_and_grads", "bf16.master_weights_and_grads");
  bf16.map("bf16_optimizer_states", "bf16.optimizer_states");
  bf16.finish();
}

DeepSpeedImport Importer::run() {
  Section root(*this, &json_.root, "", "");
  zhost_table(root);
  batch_sizes(root);
  top_level(root);
  precision(root);
  import_zero(*this, root);
  import_optimizer(*this, root);
  import_scheduler(*this, root);
  import_features(*this, root);
  root.finish();
  std::stable_sort(out_.records.begin(), out_.records.end(), [](const ImportRecord& a, const ImportRecord& b) {
    return std::tie(a.at.line, a.at.column) < std::tie(b.at.line, b.at.column);
  });
  return std::move(out_);
}

}  // namespace zhost::config::ds

namespace zhost::config {
DeepSpeedImport import_deepspeed(const JsonConfig& json, const ImportOverrides& overrides) {
  return ds::Importer(json, overrides).run();
}
}  // namespace zhost::config
