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
  zhost_status* status = host->kv_get(ctx, key, out, sizeof(out), &len, 50);
  *code = status ? host->status_code(status) : ZHOST_OK;
  if (status) host->status_destroy(status);
  return std::string(out, len);
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
  ASSERT_EQ(host->kv_set(alpha, "round", "1", 1), nullptr);
  ASSERT_EQ(host->kv_set(beta, "round", "2", 1), nullptr);
  ASSERT_EQ(host->kv_set(alpha, "only_alpha", "x", 1), nullptr);
  zhost_status_code code;
  EXPECT_EQ(get_value(host, alpha, "round", &code), "1");
  EXPECT_EQ(get_value(host, beta, "round", &code), "2");
  get_value(host, beta, "only_alpha", &code);
  EXPECT_EQ(code, ZHOST_ERR_TIMEOUT);
  // A second instance of the same plugin (another rank's, in a real job) shares its keys.
  zhost_host_context* alpha_again = services.create_context(PluginContextSpec{"alpha", {}});
  EXPECT_EQ(get_value(host, alpha_again, "only_alpha", &code), "x");
}
