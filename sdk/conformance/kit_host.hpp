// sdk/conformance/kit_host.hpp: the minimal host-services table the conformance kit hands a plugin under
// test: statuses, log, config (the descriptor's defaults plus overrides), host buffers (accounted, so that
// leaks show), a one-rank kv store, clocks and spans, the abort flag, and tier_for for a tier the kit
// installs (its reference storage tier). No collectives, parameter storage or device copies: a plugin must
// cope with their absence (the ABI allows NULL there).
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "zhost/zhost.h"

namespace zhost::conformance {

class KitHost {
 public:
  KitHost(const zhost_plugin_descriptor* descriptor, std::map<std::string, std::string> overrides, bool verbose);
  ~KitHost();
  KitHost(const KitHost&) = delete;
  KitHost& operator=(const KitHost&) = delete;

  const zhost_host_services* table() const { return &table_; }
  zhost_host_context* context() { return reinterpret_cast<zhost_host_context*>(this); }

  // The tier tier_for(role) answers with; instance NULL: none.
  void set_tier(zhost_tier_role role, const zhost_tier_ref& ref) { tiers_[role] = ref; }
  uint64_t live_buffer_bytes() const;

  // Status helpers for the checks: the message (and code) of `status`, which is destroyed.
  std::string take_message(zhost_status* status, zhost_status_code* code = nullptr) const;

  // The kit's own status objects (also used by the kit's storage tier).
  static zhost_status* make_status(zhost_status_code code, const std::string& message);

 private:
  static KitHost& of(zhost_host_context* ctx) { return *reinterpret_cast<KitHost*>(ctx); }
  const std::string* config_literal(const char* key, zhost_config_type type, zhost_status** error) const;

  static zhost_status* config_get(zhost_host_context* ctx, zhost_config_get_args* args);
  static zhost_status* buffer_alloc(zhost_host_context* ctx, zhost_buffer_alloc_args* args);
  static zhost_status* buffer_release(zhost_host_context* ctx, zhost_buffer_release_args* args);
  static zhost_status* kv_set(zhost_host_context* ctx, zhost_kv_set_args* args);
  static zhost_status* kv_get(zhost_host_context* ctx, zhost_kv_get_args* args);
  static zhost_status* tier_for(zhost_host_context* ctx, zhost_tier_ref* out);

  struct Key {
    zhost_config_type type;  // kReadKey: a key the plugin reads (reads_keys), typed by the getter it calls
    std::string literal;
  };
  static constexpr zhost_config_type kReadKey = static_cast<zhost_config_type>(0);
  std::map<std::string, Key> config_;
  mutable std::map<std::string, std::string> strings_;  // config_get string results, valid until destruction
  struct Buffer {
    void* data;
    uint64_t bytes;
  };
  mutable std::mutex mutex_;
  std::map<zhost_buffer_handle, Buffer> buffers_;
  zhost_buffer_handle next_handle_ = 1;
  std::map<std::string, std::vector<char>> kv_;
  std::map<zhost_tier_role, zhost_tier_ref> tiers_;
  bool verbose_;
  int32_t aborted_ = 0;
  zhost_host_services table_{};
};

}  // namespace zhost::conformance
