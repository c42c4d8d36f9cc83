// host/cli/export_command.cpp: `zhost export CHECKPOINT OUT`: a checkpoint's fp32 master weights as (sharded)
// safetensors, under Hugging Face's names and layouts with a config.json (gpt, llama and hf models), or under
// zhost's own names (docs/checkpoints.md, "Export").
#include <spdlog/spdlog.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "host/checkpoint/checkpoint_dir.hpp"
#include "host/checkpoint/export.hpp"
#include "host/checkpoint/synced_file.hpp"
#include "host/cli/commands.hpp"
#include "host/core/error.hpp"

#if ZHOST_HAS_ENGINE
#include "host/model/hf_layout.hpp"
#include "host/model/model.hpp"
#endif

namespace zhost::cli {

int export_command(const ExportOptions& options) {
#if ZHOST_HAS_ENGINE
  namespace fs = std::filesystem;
  using json = nlohmann::json;
  const std::string dir = checkpoint::resolve_checkpoint(options.checkpoint, options.checkpoint);
  checkpoint::CheckpointReader reader(dir);
  std::vector<checkpoint::ExportTensor> tensors = checkpoint::tensors_as_saved(reader);
  std::optional<model::HfExportLayout> layout;
  if (options.names == "hf") {
    layout = model::hf_export_layout(reader.meta().value("job", json::object()).value("model_spec", json::object()));
    if (!layout->tensors.empty()) {
      tensors.clear();
      for (const model::HfExportTensor& t : layout->tensors)
        tensors.push_back({t.name, t.source, t.shape, t.transposed});
    }
  }
  const checkpoint::ExportSummary summary =
      checkpoint::export_safetensors(reader, tensors, options.out_dir, options.max_shard_bytes);
  std::string side_files;
  if (layout) {
    checkpoint::write_file_synced((fs::path(options.out_dir) / "config.json").string(), layout->config.dump(2) + "\n");
    std::error_code error;
    if (!layout->files_from.empty() && fs::is_directory(layout->files_from, error))
      side_files = fmt::format(", {} tokenizer file(s) from {}",
                               model::copy_hf_side_files(layout->files_from, options.out_dir), layout->files_from);
  }
  spdlog::info("exported {} tensors ({:.1f} MB, fp32 masters, {} names) of {} into {}: {} safetensors file(s){}{}",
               tensors.size(), static_cast<double>(summary.tensor_bytes) / 1e6, options.names, dir, options.out_dir,
               summary.files.size(), layout ? ", config.json" : "", side_files);
  return 0;
#else
  (void)options;
  fail_usage(
      "this zhost was built without the training engine (ZHOST_WITH_TORCH=OFF): rebuild with LibTorch to export");
#endif
}

}  // namespace zhost::cli
