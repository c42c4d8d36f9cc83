// sdk/conformance/common_checks.cpp: checks every plugin kind must pass: negotiation, the descriptor's
// shape, probe, check_config, and create/destroy.
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <string>

#include "checks.hpp"

namespace zhost::conformance {
namespace {

const char* kind_area(zhost_capability_kind kind) {
  switch (kind) {
    case ZHOST_KIND_PARTITION:
      return "partition";
    case ZHOST_KIND_OFFLOAD:
      return "offload";
    case ZHOST_KIND_COLLECTIVE:
      return "collective";
  }
  return "";
}

bool is_name(const char* text) {
  if (!text || !*text) return false;
  for (const char* c = text; *c; ++c)
    if (!(std::islower(static_cast<unsigned char>(*c)) || std::isdigit(static_cast<unsigned char>(*c)) || *c == '_'))
      return false;
  return true;
}

// A default literal that reads as the key's type.
bool literal_fits(const zhost_config_key& key) {
  if (!key.default_value) return true;  // required key
  const std::string v = key.default_value;
  char* end = nullptr;
  switch (key.type) {
    case ZHOST_CONFIG_BOOL:
      return v == "true" || v == "false";
    case ZHOST_CONFIG_INT:
    case ZHOST_CONFIG_FLOAT:
      std::strtod(v.c_str(), &end);
      return !v.empty() && *end == '\0';
    case ZHOST_CONFIG_STRING:
      return v.size() >= 2 && v.front() == '"' && v.back() == '"';
  }
  return false;
}

}  // namespace

void check_common(const CheckRun& run) {
  const zhost_negotiation& n = run.plugin.negotiation();
  const zhost_plugin_descriptor& d = run.plugin.descriptor();
  const zhost_plugin_api& api = run.plugin.api();

  run.check("negotiation: versions and table sizes", [&] {
    expect(n.plugin_min_host_minor <= n.plugin_abi_minor,
           "plugin_min_host_minor " + std::to_string(n.plugin_min_host_minor) + " exceeds the minor it was built with");
    if (n.plugin_min_host_minor > ZHOST_ABI_MINOR)
      throw Skipped("the plugin needs host ABI " + std::to_string(ZHOST_ABI_MAJOR) + "." +
                    std::to_string(n.plugin_min_host_minor) + ", this kit is " + std::to_string(ZHOST_ABI_MAJOR) + "." +
                    std::to_string(ZHOST_ABI_MINOR));
    expect(d.struct_size >= ZHOST_PLUGIN_DESCRIPTOR_MIN_SIZE, "descriptor struct_size below the minimum");
    expect(api.struct_size >= ZHOST_PLUGIN_API_SIZE, "lifecycle table struct_size below the minimum");
    expect(api.create && api.destroy, "create or destroy is NULL");
  });

  run.check("descriptor: names, capabilities, kind table, config keys", [&] {
    expect(is_name(d.name), std::string("name '") + (d.name ? d.name : "") + "' is not [a-z0-9_]+");
    expect(d.version && *d.version, "no version");
    expect(d.provides && d.provides[0], "provides no capability");
    for (const char* const* cap = d.provides; cap && *cap; ++cap) {
      const std::string c = *cap, area = kind_area(d.kind);
      expect(c.rfind(area + ":", 0) == 0 && is_name(c.c_str() + area.size() + 1),
             "capability '" + c + "' is not '" + area + ":<name>' for this kind");
    }
    const bool tables[3] = {api.partition != nullptr, api.storage != nullptr || api.optimizer != nullptr,
                            api.collective != nullptr};
    for (int k = 0; k < 3; ++k)
      expect(tables[k] == (d.kind == static_cast<zhost_capability_kind>(k + 1)),
             "the tables present do not match the descriptor's kind (only that kind's tables may be set)");
    for (size_t i = 0; i < d.num_config_keys; ++i) {
      const zhost_config_key& key = d.config_keys[i];
      expect(key.struct_size >= ZHOST_CONFIG_KEY_SIZE && key.key && *key.key,
             "config key " + std::to_string(i) + " is malformed");
      expect(literal_fits(key), std::string("config key '") + key.key + "' has a default that is not of its type");
      expect(!key.choices || key.type == ZHOST_CONFIG_STRING,
             std::string("config key '") + key.key + "' has choices but is no string");
    }
  });

  run.check("probe: answers here or says why not", [&] {
    if (!api.probe) throw Skipped("no probe function (optional)");
    auto host = run.host();
    zhost_status_code code = ZHOST_OK;
    const zhost_probe_args probe{sizeof(probe), nullptr, host->table(), host->context()};
    const std::string message = host->take_message(api.probe(&probe), &code);
    if (code == ZHOST_ERR_UNSUPPORTED) throw Skipped("cannot run on this machine: " + message);
    expect(code == ZHOST_OK,
           "probe failed with code " + std::to_string(code) + " (only UNSUPPORTED may refuse): " + message);
  });

  run.check("check_config: accepts the kit's config or refuses it with one line at a key it declares", [&] {
    if (!api.check_config) throw Skipped("no check_config function (optional)");
    // As `zhost config check` asks a tier that serves every storing role it declares, on one rank.
    uint32_t roles = 0;
    if (d.kind == ZHOST_KIND_OFFLOAD && (d.flags & ZHOST_PLUGIN_FLAG_TIER_STORES))
      roles = (1u << ZHOST_TIER_FOR_OPTIMIZER_STORAGE) | (1u << ZHOST_TIER_FOR_PARAMS);
    std::string first;
    for (int round = 0; round < 2; ++round) {  // nothing is kept between calls: the same answer twice
      auto host = run.host();
      zhost_config_check_args args{};
      args.struct_size = sizeof(args);
      args.host = host->table();
      args.ctx = host->context();
      args.tier_roles = roles;
      args.job_tier_roles = roles;
      args.chosen_for = "zhost-conformance";
      args.world_size = 1;
      args.local_ranks = 1;
      zhost_status_code code = ZHOST_OK;
      const std::string message = host->take_message(api.check_config(&args), &code);
      expect(code == ZHOST_OK || code == ZHOST_ERR_CONFIG || code == ZHOST_ERR_UNSUPPORTED,
             "check_config failed with code " + std::to_string(code) +
                 " (only CONFIG or UNSUPPORTED may refuse): " + message);
      expect(code == ZHOST_OK || !message.empty(), "check_config refused without a message");
      expect(message.find('\n') == std::string::npos, "check_config's refusal is more than one line: " + message);
      if (code == ZHOST_ERR_CONFIG && args.key) {
        bool declared = false;
        for (size_t i = 0; i < d.num_config_keys; ++i)
          declared = declared || std::strcmp(d.config_keys[i].key, args.key) == 0;
        expect(declared,
               std::string("check_config refused at key '") + args.key + "', which the plugin does not declare");
      }
      const std::string answer = std::to_string(code) + ": " + message;
      if (round == 0) first = answer;
      expect(answer == first,
             "check_config answered differently the second time: '" + first + "', then '" + answer + "'");
    }
    if (first.rfind("0: ", 0) != 0) throw Skipped("refuses the kit's config: " + first.substr(first.find(' ') + 1));
  });

  run.check("lifecycle: create and destroy, twice", [&] {
    auto host = run.host();
    for (int round = 0; round < 2; ++round) {
      Instance instance(run.plugin, *host);
      expect(instance.get() != nullptr, "create failed: " + instance.error());
    }
  });
}

}  // namespace zhost::conformance
