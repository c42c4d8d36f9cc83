// host/plugins/loader.cpp: Boost.DLL loading, trust checks, ABI negotiation and descriptor validation.
#include "host/plugins/loader.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <boost/dll/shared_library.hpp>
#include <cmath>
#include <cstring>
#include <mutex>
#include <regex>

#include "host/core/error.hpp"
#include "host/core/text.hpp"
#include "host/services/plugin_struct.hpp"
#include "zhost/collective.h"
#include "zhost/partition.h"
#include "zhost/zhost.h"

namespace zhost {
namespace {

// Plugins stay mapped for the life of the process: hot-swap must not depend on dlclose (see plugin.h).
void keep_loaded_forever(boost::dll::shared_library library) {
  static std::mutex mutex;
  static std::vector<boost::dll::shared_library>* libraries = new std::vector<boost::dll::shared_library>();
  std::lock_guard<std::mutex> lock(mutex);
  libraries->push_back(std::move(library));
}

constexpr uint32_t kNewestMajorProbed = 15;

// Reads a NULL-terminated string array (which may itself be NULL).
std::vector<std::string> string_list(const char* const* list) {
  std::vector<std::string> out;
  for (; list && *list; ++list) out.emplace_back(*list);
  return out;
}

bool valid_plugin_name(const std::string& name) {
  static const std::regex pattern("[a-z0-9_]+");
  return std::regex_match(name, pattern);
}

bool valid_capability(const std::string& capability) {
  static const std::regex pattern("(partition|offload|collective):[a-z0-9_]+");
  return std::regex_match(capability, pattern);
}

// A C enum field as the int the plugin stored: reading a value outside the enumerators through the enum
// type is undefined in C++ (found by tests/fuzz/fuzz_descriptor.cpp).
template <typename Enum>
int enum_value(const Enum& field) {
  static_assert(sizeof(Enum) == sizeof(int), "zhost's C enums are int-sized");
  int value;
  std::memcpy(&value, &field, sizeof(value));
  return value;
}

// The longest reason for a malformed descriptor, which quotes the plugin's strings.
constexpr size_t kMaxReasonBytes = 400;

// A plugin's display text (summary, a key's doc) as the host shows it, in messages and in config check's
// tables: on one line, each control character (a newline, a tab) a space.
std::string display_text(const char* text) {
  std::string shown = text ? text : "";
  for (char& c : shown)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = ' ';
  return shown;
}

class DescriptorReader {
 public:
  explicit DescriptorReader(const std::filesystem::path& file) : file_(file.string()) {}

  [[noreturn]] void malformed(const std::string& why) const {
    // `why` quotes the plugin's own strings: keep them to one printable line.
    fail_usage("plugin {}: malformed descriptor: {}", file_, text::excerpt(why, kMaxReasonBytes));
  }

  PluginInfo read(const zhost_plugin_descriptor* d) const {
    if (d == nullptr) fail_usage("plugin {}: negotiation returned no descriptor", file_);
    accept_plugin_struct(d, ZHOST_PLUGIN_DESCRIPTOR_MIN_SIZE, "zhost_plugin_descriptor", "plugin " + file_);
    PluginInfo info;
    if (!d->name || !valid_plugin_name(d->name)) malformed("name must be [a-z0-9_]+");
    info.name = d->name;
    if (!d->version || !*d->version) malformed(fmt::format("plugin '{}' has no version", info.name));
    info.version = d->version;
    info.summary = display_text(d->summary);
    const int kind = enum_value(d->kind);
    if (kind < ZHOST_KIND_PARTITION || kind > ZHOST_KIND_COLLECTIVE)
      malformed(fmt::format("plugin '{}' has unknown capability kind {}", info.name, kind));
    info.kind = static_cast<zhost_capability_kind>(kind);
    info.provides = string_list(d->provides);
    if (info.provides.empty()) malformed(fmt::format("plugin '{}' provides nothing", info.name));
    for (const auto& cap : info.provides) {
      if (!valid_capability(cap)) malformed(fmt::format("capability '{}' is not of the form area:item", cap));
      if (capability_area(cap) != kind_name(info.kind))
        malformed(fmt::format("plugin '{}' is a {} plugin but provides '{}'", info.name, kind_name(info.kind), cap));
    }
    info.requires_caps = string_list(d->requires_caps);
    info.conflicts = string_list(d->conflicts);
    for (const auto& cap : info.requires_caps)
      if (!valid_capability(cap)) malformed(fmt::format("required capability '{}' is not of the form area:item", cap));
    for (const auto& cap : info.conflicts)
      if (!valid_capability(cap))
        malformed(fmt::format("conflicting capability '{}' is not of the form area:item", cap));
    if (d->num_config_keys && !d->config_keys) malformed("num_config_keys > 0 but config_keys is NULL");
    for (size_t i = 0; i < d->num_config_keys; ++i) info.config_keys.push_back(read_key(info.name, d->config_keys[i]));
    info.flags = d->flags;
    if (ZHOST_HAS_FIELD(d, zhost_plugin_descriptor, reads_keys)) info.reads_keys = string_list(d->reads_keys);
    for (const auto& key : info.reads_keys) {
      if (key.empty()) malformed(fmt::format("plugin '{}' reads a config key without a name", info.name));
      for (const auto& declared : info.config_keys)
        if (declared.key == key)
          malformed(
              fmt::format("plugin '{}' both declares and reads config key '{}'; keep the declaration", info.name, key));
    }
    return info;
  }

 private:
  ConfigKeyInfo read_key(const std::string& plugin, const zhost_config_key& k) const {
    accept_plugin_struct(&k, ZHOST_CONFIG_KEY_MIN_SIZE, "zhost_config_key",
                         fmt::format("plugin {}: config key entry of '{}'", file_, plugin));
    if (!k.key || !*k.key) malformed(fmt::format("plugin '{}' declares a config key without a name", plugin));
    ConfigKeyInfo key;
    key.key = k.key;
    const int type = enum_value(k.type);
    if (type < ZHOST_CONFIG_BOOL || type > ZHOST_CONFIG_STRING)
      malformed(fmt::format("config key '{}' has unknown type {}", key.key, type));
    key.type = static_cast<zhost_config_type>(type);
    if (k.default_value) key.default_literal = k.default_value;
    key.doc = display_text(k.doc);
    if (k.has_range) {
      if (std::isnan(k.min_value) || std::isnan(k.max_value) || k.min_value > k.max_value)
        malformed(fmt::format("config key '{}' has an empty range", key.key));
      key.min_value = k.min_value;
      key.max_value = k.max_value;
    }
    key.choices = string_list(k.choices);
    return key;
  }

  std::string file_;
};

// The lifecycle table and the capability tables of the plugin's kind, each accepted from its minimum size
// (plugin_struct.hpp): what the host reads of them later is either within the minimum or under ZHOST_HAS_FIELD.
// An offload tier's tables must match the roles its flags declare (zhost/storage.h).
void check_api(const std::filesystem::path& file, const PluginInfo& info, const zhost_plugin_api* api) {
  const std::string where = fmt::format("plugin {}: '{}'", file.string(), info.name);
  accept_plugin_struct(api, ZHOST_PLUGIN_API_MIN_SIZE, "zhost_plugin_api", where);
  if (!api->create || !api->destroy) fail_usage("{} has no create or destroy function", where);
  if (info.kind == ZHOST_KIND_OFFLOAD) {
    const bool stores = (info.flags & ZHOST_PLUGIN_FLAG_TIER_STORES) != 0;
    const bool computes = (info.flags & ZHOST_PLUGIN_FLAG_TIER_COMPUTES) != 0;
    if (!stores && !computes)
      fail_usage("{} is an offload tier that declares neither ZHOST_PLUGIN_FLAG_TIER_STORES nor _COMPUTES", where);
    if (stores != (api->storage != nullptr))
      fail_usage("{}: {} but its storage table is {}", where,
                 stores ? "declares ZHOST_PLUGIN_FLAG_TIER_STORES" : "does not declare ZHOST_PLUGIN_FLAG_TIER_STORES",
                 api->storage ? "set" : "NULL");
    if (computes != (api->optimizer != nullptr))
      fail_usage(
          "{}: {} but its optimizer table is {}", where,
          computes ? "declares ZHOST_PLUGIN_FLAG_TIER_COMPUTES" : "does not declare ZHOST_PLUGIN_FLAG_TIER_COMPUTES",
          api->optimizer ? "set" : "NULL");
    if (api->storage) accept_plugin_struct(api->storage, ZHOST_STORAGE_API_MIN_SIZE, "zhost_storage_api", where);
    if (api->optimizer)
      accept_plugin_struct(api->optimizer, ZHOST_OPTIMIZER_TIER_API_MIN_SIZE, "zhost_optimizer_tier_api", where);
    if (api->partition || api->collective) fail_usage("{} is an offload tier but fills another kind's table", where);
    return;
  }
  const bool partition = info.kind == ZHOST_KIND_PARTITION;
  const void* own = partition ? static_cast<const void*>(api->partition) : static_cast<const void*>(api->collective);
  if (!own) fail_usage("{} is a {} plugin but has no {} table", where, kind_name(info.kind), kind_name(info.kind));
  if (api->storage || api->optimizer || (partition ? api->collective != nullptr : api->partition != nullptr))
    fail_usage("{} is a {} plugin but fills another kind's table", where, kind_name(info.kind));
  if (partition)
    accept_plugin_struct(api->partition, ZHOST_PARTITION_API_MIN_SIZE, "zhost_partition_api", where);
  else
    accept_plugin_struct(api->collective, ZHOST_COLLECTIVE_API_MIN_SIZE, "zhost_collective_api", where);
}

}  // namespace

void check_plugin_file_is_trusted(const std::filesystem::path& file) {
  struct stat st {};
  if (::stat(file.c_str(), &st) != 0) fail_usage("plugin {}: file not found", file.string());
  if (!S_ISREG(st.st_mode)) fail_usage("plugin {}: not a regular file", file.string());
  if (st.st_mode & S_IWOTH)
    fail_usage(
        "plugin {}: refusing to load a world-writable plugin (anyone could replace its code); "
        "run chmod o-w on it",
        file.string());
  if (st.st_uid != ::getuid() && st.st_uid != 0)
    fail_usage("plugin {}: refusing to load a plugin owned by uid {}, neither you (uid {}) nor root", file.string(),
               st.st_uid, ::getuid());
  // Whoever may write the folder may replace the file; a sticky folder (/tmp) lets only the owner do that.
  const std::filesystem::path folder = file.has_parent_path() ? file.parent_path() : std::filesystem::path(".");
  struct stat dir {};
  if (::stat(folder.c_str(), &dir) != 0) fail_usage("plugin {}: cannot stat its folder", file.string());
  if ((dir.st_mode & S_IWOTH) && !(dir.st_mode & S_ISVTX))
    fail_usage(
        "plugin {}: refusing to load a plugin from the world-writable folder {} (anyone could replace its "
        "code); run chmod o-w on the folder",
        file.string(), folder.string());
}

LoadedPlugin PluginLoader::load(const std::filesystem::path& file) const {
  check_plugin_file_is_trusted(file);
  const std::string where = file.string();
  boost::dll::shared_library library;
  try {
    library.load(file, boost::dll::load_mode::rtld_lazy | boost::dll::load_mode::rtld_local);
  } catch (const std::exception& e) {
    fail_usage("plugin {}: cannot load shared object: {}", where, e.what());
  }
  if (!library.has(ZHOST_ENTRY_SYMBOL_V1)) {
    for (uint32_t major = kNewestMajorProbed; major != static_cast<uint32_t>(-1); --major)
      if (major != ZHOST_ABI_MAJOR && library.has("zhost_plugin_v" + std::to_string(major)))
        fail_usage(
            "plugin {}: speaks zhost ABI major {}, this zhost speaks major {}: rebuild it against the zhost SDK "
            "{}.x (docs/abi.md, section 1)",
            where, major, ZHOST_ABI_MAJOR, ZHOST_ABI_MAJOR);
    fail_usage("plugin {}: no entry symbol '{}' (not a zhost plugin, or the entry was not exported)", where,
               ZHOST_ENTRY_SYMBOL_V1);
  }
  auto entry = library.get<zhost_status*(zhost_negotiation*)>(ZHOST_ENTRY_SYMBOL_V1);
  LoadedPlugin plugin = negotiate(entry, file);
  keep_loaded_forever(std::move(library));
  return plugin;
}

LoadedPlugin PluginLoader::load_builtin(const BuiltinPlugin& builtin) const {
  return negotiate(builtin.entry, "<built-in>");
}

LoadedPlugin PluginLoader::negotiate(zhost_plugin_entry_v1_fn entry, const std::filesystem::path& file) const {
  const std::string where = file.string();

  zhost_negotiation io{};
  io.struct_size = sizeof(io);
  io.host_abi_major = ZHOST_ABI_MAJOR;
  io.host_abi_minor = services_.abi_minor();
  io.host = HostServices::negotiation_table(services_.abi_minor());
  if (zhost_status* refused = entry(&io)) {
    const zhost_host_services* host = services_.table();
    std::string reason = host->status_message(refused);
    host->status_destroy(refused);
    fail_usage("plugin {}: refused to load: {}", where, reason);
  }

  LoadedPlugin plugin;
  plugin.path = file;
  plugin.abi_major = ZHOST_ABI_MAJOR;
  plugin.abi_minor = io.plugin_abi_minor;
  plugin.min_host_minor = io.plugin_min_host_minor;
  plugin.info = DescriptorReader(file).read(io.descriptor);
  if (plugin.min_host_minor > services_.abi_minor())
    fail_usage(
        "plugin {}: '{}' needs zhost ABI {}.{} or newer, this host offers {}.{}: upgrade zhost or rebuild the "
        "plugin against this SDK",
        where, plugin.info.name, ZHOST_ABI_MAJOR, plugin.min_host_minor, ZHOST_ABI_MAJOR, services_.abi_minor());
  check_api(file, plugin.info, io.api);
  plugin.api = io.api;
  return plugin;
}

namespace {
std::vector<BuiltinPlugin>& builtin_registry() {
  static std::vector<BuiltinPlugin> registry;
  return registry;
}
}  // namespace

void register_builtin_plugin(const std::string& name, zhost_plugin_entry_v1_fn entry) {
  for (const auto& existing : builtin_registry())
    if (existing.name == name) return;
  builtin_registry().push_back({name, entry});
}

const std::vector<BuiltinPlugin>& builtin_plugins() { return builtin_registry(); }

}  // namespace zhost
