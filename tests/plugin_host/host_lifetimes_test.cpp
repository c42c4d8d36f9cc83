// tests/plugin_host/host_lifetimes_test.cpp: Note [Lifetimes] (docs/abi.md) as the host keeps it: the
// table negotiation hands out outlives every job's services, and each plugin's key-value keys live under
// its own prefix, so two plugins setting the same key never see each other's value. Called through the
// real table, as a plugin calls it.
#include <gtest/gtest.h>

#include <string>

#include "host/services/host_services.hpp"

using namespace zhost;

namespace {

std::string get_value(const zhost_host_services* host, zhost_host_context* ctx, const char* key,
                      zhost_status_code* code) {
  char out[64] = {};
  size_t len = 0;
  zhost_kv_get_args args{sizeof(args), nullptr, key, out, sizeof(out), 0, 50};
  zhost_status* status = host->kv_get(ctx, &args);
  len = args.len;
  *code = status ? host->status_code(status) : ZHOST_OK;
  if (status) host->status_destroy(status);
  return std::string(out, len);
}

zhost_status* kv_set(const zhost_host_services* host, zhost_host_context* ctx, const char* key, const char* value) {
  zhost_kv_set_args args{sizeof(args), nullptr, key, value, 1};
  return host->kv_set(ctx, &args);
}

}  // namespace

TEST(HostLifetimes, NegotiationTableOutlivesTheServicesThatMadeIt) {
  const zhost_host_services* negotiated = nullptr;
  {
    HostServices services;
    negotiated = HostServices::negotiation_table(services.abi_minor());
    EXPECT_NE(negotiated, services.table());  // not the job's table, which dies with `services`
  }
  HostServices later;  // a second job in the same process gets the same table
  EXPECT_EQ(HostServices::negotiation_table(later.abi_minor()), negotiated);
  zhost_status* status = negotiated->status_create(ZHOST_ERR_IO, "still callable");
  ASSERT_NE(status, nullptr);
  EXPECT_STREQ(negotiated->status_message(status), "still callable");
  negotiated->status_destroy(status);
  EXPECT_EQ(negotiated->collectives, nullptr);  // no job's services in it
}

TEST(HostLifetimes, EachPluginsKeyValueKeysAreItsOwn) {
  HostServices services;
  const zhost_host_services* host = services.table();
  zhost_host_context* alpha = services.create_context(PluginContextSpec{"alpha", {}});
  zhost_host_context* beta = services.create_context(PluginContextSpec{"beta", {}});
  ASSERT_EQ(kv_set(host, alpha, "round", "1"), nullptr);
  ASSERT_EQ(kv_set(host, beta, "round", "2"), nullptr);
  ASSERT_EQ(kv_set(host, alpha, "only_alpha", "x"), nullptr);
  zhost_status_code code;
  EXPECT_EQ(get_value(host, alpha, "round", &code), "1");
  EXPECT_EQ(get_value(host, beta, "round", &code), "2");
  get_value(host, beta, "only_alpha", &code);
  EXPECT_EQ(code, ZHOST_ERR_TIMEOUT);
  // A second instance of the same plugin (another rank's, in a real job) shares its keys.
  zhost_host_context* alpha_again = services.create_context(PluginContextSpec{"alpha", {}});
  EXPECT_EQ(get_value(host, alpha_again, "only_alpha", &code), "x");
}
