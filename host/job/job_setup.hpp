// host/job/job_setup.hpp: from a config file to a checked job: the TOML document with overrides, the
// plugins found on the search path, the plugins this config needs (resolved), and the config validated
// against the host's keys plus the chosen plugins' keys. Shared by `zhost config check` and `zhost run`.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "host/config/document/document.hpp"
#include "host/config/schema/resolved.hpp"
#include "host/config/schema/schema.hpp"
#include "host/plugins/discovery.hpp"
#include "host/plugins/instances.hpp"
#include "host/plugins/resolver.hpp"
#include "host/services/host_services.hpp"

namespace zhost {

struct JobSetup {
  std::unique_ptr<HostServices> services;
  Discovery discovery;
  std::vector<Need> needs;
  Resolution resolution;
  config::Schema schema;
  std::unique_ptr<config::ResolvedConfig> config;
  // Keys accepted with a note or read under a deprecated name (DeepSpeed JSON configs), and settings that do
  // nothing in this job (ResolvedConfig::warnings()), one line each; `config check` prints them.
  std::vector<std::string> notes;
  // What the job takes that the user did not write, one line each (HF "auto"s filled with HF Trainer's
  // defaults, ...): rank 0 logs them at info level when the job starts; `config check` prints them.
  std::vector<std::string> infos;

  // The values a chosen plugin declared, for its host context.
  std::map<std::string, ConfigValue> plugin_config(const LoadedPlugin& plugin) const;
};

// The values `config` holds for the keys `plugin` declared or reads, for its host context.
std::map<std::string, ConfigValue> plugin_config_values(const config::ResolvedConfig& config,
                                                        const LoadedPlugin& plugin);

struct JobSetupOptions {
  std::filesystem::path config_file;
  std::filesystem::path companion_file;  // with a DeepSpeed JSON config: zhost's own keys in TOML
  std::vector<std::string> overrides;    // "a.b=c" from --set
  std::vector<std::string> plugin_dirs;  // --plugin-path, searched before the config's plugins.path
};

// Declares a plugin's config keys (from its descriptor) in `schema`. `relax_required`: a key without a
// default becomes optional, for the first pass, where plugins the config will not use must not demand
// their required keys.
void add_plugin_keys(config::Schema& schema, const LoadedPlugin& plugin, bool relax_required = false);

// Declares in `schema` the keys `plugin` reads (reads_keys) that it lacks, each as the plugin in `found` that
// declares it does; a key no one declares is a usage error (Note [Each key declared once]).
void add_read_keys(config::Schema& schema, const LoadedPlugin& plugin, const std::vector<LoadedPlugin>& found);

// The config file with its companion and overrides applied, before validation.
config::Document load_job_document(const JobSetupOptions& options);

// Every storing tier found, when the job's computing tier can move its states: a schedule or `zhost control` may
// swap any of them in (Note [Storage swap]), so their keys are this job's keys too.
std::vector<const LoadedPlugin*> swappable_storages(const Resolution& resolution,
                                                    const std::vector<LoadedPlugin>& found);

// Throws UsageError (or config::ConfigErrors) with one line per problem; nothing is created.
JobSetup prepare_job(const JobSetupOptions& options);

}  // namespace zhost
