// host/config/document/document.hpp: a user's config as written: a TOML file (or text) plus --set overrides,
// with the file position or override that each value came from. validate() turns it into values.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "host/config/parse/value.hpp"

namespace zhost::config {

struct DocumentData;  // host/config/document/document_data.hpp (internal: it holds the toml++ tree)

class Document {
 public:
  // An empty config (every key at its default), for runs configured only through --set.
  Document();
  ~Document();
  Document(const Document& other);
  Document& operator=(const Document& other);
  Document(Document&& other) noexcept;
  Document& operator=(Document&& other) noexcept;

  // Throws UsageError "FILE: cannot read ..." or "FILE:LINE:COL: <parser's reason>". `overrides`: the
  // --set assignments that apply_overrides() will apply; a DeepSpeed JSON file is mapped with the stage and
  // offload devices they set (what DeepSpeed would read depends on them), the other keys stay theirs.
  static Document load_file(const std::string& path, const std::vector<std::string>& overrides = {});
  // `source_name` stands in for the file name in messages ("FILE:LINE:").
  static Document parse(std::string_view toml_text, const std::string& source_name,
                        const std::vector<std::string>& overrides = {});

  // Applies one override, the text after --set: "zero.stage=2", "zero.offload_optimizer.device=cpu",
  // "optimizer.betas=[0.9,0.95]". The value is read as TOML when it parses as one value (true, 3, 5e8,
  // "x", [..]), else taken as a bare string. Missing tables are created. Throws UsageError, prefixed
  // "--set ASSIGNMENT:", when the text is not KEY=VALUE or the path runs through a value or onto a table.
  // Whether the key exists is checked by validate(), like any key in the file.
  void apply_override(std::string_view assignment);
  void apply_overrides(const std::vector<std::string>& assignments);

  // Merges zhost's own keys (model, data, steps, ...) from a TOML file into a DeepSpeed JSON config; a key
  // both set is an error reported by validate(). Throws UsageError when the file is not TOML.
  void add_companion(const std::string& toml_path);

  const std::string& source_name() const;
  // True for a DeepSpeed JSON config (docs/config.md, "From DeepSpeed JSON").
  bool is_deepspeed_json() const;
  // "FILE:LINE:COL: note: ..." for each DeepSpeed key accepted with a note or read under a deprecated name,
  // and each HF "auto" that --set, a companion or the "zhost" table fills (Note [HF's "auto"]).
  std::vector<std::string> notes() const;
  // "FILE:LINE:COL: ..." for what reading the file refused: a DeepSpeed key, a key a companion sets twice,
  // an HF "auto" that nothing fills. validate() reports them with the schema's errors.
  std::vector<std::string> load_errors() const;
  // HF "auto"s that neither --set, a companion nor the "zhost" table fills and that HF Trainer has a default
  // for: "train_micro_batch_size_per_gpu = 8", one each (Note [HF's "auto"]). validate() fills them in.
  std::vector<std::string> hf_defaults_taken() const;
  // A DeepSpeed JSON as validate() reads it, once --set and the companion are in: the HF defaults taken, and
  // the file's activation-checkpointing refinements dropped (noted by notes()) while zhost's switch is off,
  // as DeepSpeed ignores them unless the model calls its checkpointing API.
  void settle_deepspeed_json();
  // True when the file or an override sets a value (not a table) at the dotted path.
  bool contains(const std::string& path) const;
  // The value at the dotted path as written, before validation (to find plugins before the schema is
  // complete): TOML booleans, integers, floats and strings as such, an array of numbers as a FloatList
  // and an array of strings (or an empty array) as a StringList; nullopt when absent or anything else.
  std::optional<ConfigValue> peek(const std::string& path) const;

  // For host/config's own code.
  const DocumentData& data() const { return *data_; }

 private:
  // Writes hf_defaults_taken() into the document, each with the place of its "auto" ("auto: HF Trainer
  // default"); part of settle_deepspeed_json().
  void take_hf_defaults();

  std::unique_ptr<DocumentData> data_;
};

}  // namespace zhost::config
