// tests/abi/minimum_sizes_test.cpp: a struct a plugin hands the host below its minimum size (the size it had
// in the minor that introduced it) is refused with one line naming the struct, the size given and the
// minimum; at its minimum it is accepted (docs/abi.md, "Versioning rule"). Host services are called
// through the real table, as a plugin calls them.
#include <gtest/gtest.h>

#include <string>

#include "host/core/error.hpp"
#include "host/services/host_services.hpp"
#include "host/services/plugin_struct.hpp"
#include "zhost/zhost.h"

using namespace zhost;

namespace {

// The status's message ("" for success), releasing it.
std::string message_of(const zhost_host_services* host, zhost_status* status) {
  if (!status) return "";
  std::string message = host->status_message(status);
  EXPECT_EQ(host->status_code(status), ZHOST_ERR_INVALID_ARGUMENT);
  host->status_destroy(status);
  return message;
}

std::string refusal(const char* type, size_t given, size_t minimum) {
  return fmt::format("{} has struct_size {}, below its minimum of {} bytes", type, given, minimum);
}

}  // namespace

TEST(MinimumSizes, BufferAllocArgsBelowTheirMinimumAreRefused) {
  HostServices services;
  const zhost_host_services* host = services.table();
  zhost_host_context* ctx = services.create_context(PluginContextSpec{"old_plugin", {}});
  zhost_buffer_alloc_args args{};
  args.memory = ZHOST_MEMORY_HOST;
  args.size_bytes = 64;
  args.struct_size = ZHOST_BUFFER_ALLOC_ARGS_MIN_SIZE - 1;
  std::string error = message_of(host, host->buffer_alloc(ctx, &args));
  EXPECT_NE(error.find("buffer_alloc: " + refusal("zhost_buffer_alloc_args", ZHOST_BUFFER_ALLOC_ARGS_MIN_SIZE - 1,
                                                  ZHOST_BUFFER_ALLOC_ARGS_MIN_SIZE)),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("built against headers older than any this host supports"), std::string::npos) << error;
  EXPECT_EQ(services.live_buffer_bytes(ZHOST_MEMORY_HOST), 0u);

  args.struct_size = ZHOST_BUFFER_ALLOC_ARGS_MIN_SIZE;
  EXPECT_EQ(message_of(host, host->buffer_alloc(ctx, &args)), "");
  EXPECT_NE(args.data, nullptr);
  EXPECT_EQ(message_of(host, host->buffer_alloc(ctx, nullptr)),
            "buffer_alloc: no zhost_buffer_alloc_args (NULL where the ABI requires one)");
  services.destroy_context(ctx);
}

TEST(MinimumSizes, TierRefBelowItsMinimumIsRefused) {
  HostServices services;
  const zhost_host_services* host = services.table();
  zhost_host_context* ctx = services.create_context(PluginContextSpec{"old_plugin", {}});
  zhost_tier_ref ref{};
  ref.struct_size = 8;  // struct_size alone
  std::string error = message_of(host, host->tier_for(ctx, &ref));
  EXPECT_NE(error.find("tier_for: " + refusal("zhost_tier_ref", 8, ZHOST_TIER_REF_MIN_SIZE)), std::string::npos)
      << error;
  ref.struct_size = ZHOST_TIER_REF_MIN_SIZE;
  EXPECT_EQ(message_of(host, host->tier_for(ctx, &ref)), "");
  EXPECT_EQ(ref.instance, nullptr);  // no tier configured
  services.destroy_context(ctx);
}

TEST(MinimumSizes, HostCodeRefusesWithAUsageErrorNamingWhere) {
  zhost_storage_api table{};
  table.struct_size = ZHOST_STORAGE_API_MIN_SIZE - sizeof(void*);  // a table missing its last pointer
  try {
    accept_plugin_struct(&table, ZHOST_STORAGE_API_MIN_SIZE, "zhost_storage_api", "plugin x.so: 'x'");
    FAIL() << "an undersized table was accepted";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()).rfind(
                  "plugin x.so: 'x': " + refusal("zhost_storage_api", ZHOST_STORAGE_API_MIN_SIZE - sizeof(void*),
                                                 ZHOST_STORAGE_API_MIN_SIZE),
                  0),
              0u)
        << e.what();
  }
  table.struct_size = ZHOST_STORAGE_API_MIN_SIZE;
  EXPECT_EQ(&accept_plugin_struct(&table, ZHOST_STORAGE_API_MIN_SIZE, "zhost_storage_api", "x"), &table);
}
