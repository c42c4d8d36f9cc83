/* tests/plugin_host/negotiation_plugin.c: one C99 plugin compiled as several variants, each exercising a
 * row of the negotiation matrix (the VARIANT_* macro picks which). Written in C to prove the ABI is
 * usable without C++. Variants:
 *   CURRENT        built for this SDK's minor (loads on this host; refused by a host of minor 0)
 *   OLD_MINOR      claims ABI 1.0 and reads only 1.0 fields (loads on newer hosts)
 *   NEEDS_NEWER    requires a host minor newer than any that exists (refused with both versions named)
 *   WRONG_MAJOR    exports only zhost_plugin_v0, the pre-1.0 major (refused: other major)
 *   NO_ENTRY       exports no entry at all (refused: not a zhost plugin)
 *   SMALL_DESC     its descriptor's struct_size is below the minimum (refused, naming the sizes)
 *   REFUSES        the entry returns a status (refused with the plugin's reason)
 *   INIT_FAILS     negotiates, but create() fails with a message
 * Hostile variants (built into a folder of their own; a listing of it must survive them):
 *   CRASHES        the entry function writes through a null pointer (SIGSEGV)
 *   CTOR_CRASHES   a constructor of the library raises SIGSEGV as it is loaded, before any entry is looked up
 *   HANGS          the entry function never returns
 */
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "zhost/zhost.h"

static const zhost_host_services* g_host;
#ifdef VARIANT_CRASHES
static int* volatile g_nowhere = NULL; /* a null pointer the compiler cannot see through */
#endif

typedef struct test_instance {
  int created;
} test_instance;

static zhost_status* tier_store(zhost_plugin_instance* self, zhost_tier_io_args* args) {
  (void)self;
  (void)args;
  return g_host->status_create(ZHOST_ERR_UNSUPPORTED, "negotiation test plugin stores nothing");
}
static zhost_status* tier_event(zhost_plugin_instance* self, zhost_tier_event_args* args) {
  (void)self;
  args->done = 1;
  return NULL;
}
static zhost_status* tier_drop(zhost_plugin_instance* self, zhost_tier_key_args* args) {
  (void)self;
  (void)args;
  return NULL;
}
static zhost_status* tier_stream(zhost_plugin_instance* self, zhost_tier_stream_args* args) {
  (void)self;
  (void)args;
  return NULL;
}
static zhost_status* tier_memory(zhost_plugin_instance* self, zhost_tier_memory* out) {
  (void)self;
  (void)out;
  return NULL;
}

/* a storing tier only: no optimizer table */
static const zhost_storage_api k_storage = {sizeof(zhost_storage_api),
                                            NULL,
                                            tier_store,
                                            tier_store,
                                            tier_event,
                                            tier_event,
                                            tier_event,
                                            tier_drop,
                                            tier_stream,
                                            tier_stream,
                                            tier_memory};

static zhost_status* create(zhost_plugin_create_args* args) {
#ifdef VARIANT_INIT_FAILS
  (void)args;
  return g_host->status_create(ZHOST_ERR_UNSUPPORTED, "this test plugin always fails to initialise");
#else
  test_instance* inst = (test_instance*)calloc(1, sizeof(test_instance));
  if (!inst) return g_host->status_create(ZHOST_ERR_OUT_OF_MEMORY, "out of memory");
  inst->created = 1;
  args->instance = (zhost_plugin_instance*)inst;
  {
    zhost_log_args line = {sizeof(zhost_log_args), NULL, ZHOST_LOG_INFO, "negotiation test plugin created"};
    args->host->log(args->ctx, &line);
  }
  return NULL;
#endif
}

static void destroy(zhost_plugin_instance* instance) { free(instance); }

static const zhost_plugin_api k_api = {
    sizeof(zhost_plugin_api), NULL, NULL, NULL, create, destroy, NULL, &k_storage, NULL, NULL};

static const char* const k_provides[] = {"offload:" VARIANT_NAME, NULL};
static const char* const k_choices[] = {"fast", "slow", NULL};
static const zhost_config_key k_keys[] = {
    {sizeof(zhost_config_key), NULL, "zero.offload_optimizer." VARIANT_NAME "_depth", ZHOST_CONFIG_INT, "4",
     "queue depth\nof the test tier", 1, 64, 1, NULL}, /* display text over two lines: the host makes it one */
    {sizeof(zhost_config_key), NULL, "zero.offload_optimizer." VARIANT_NAME "_mode", ZHOST_CONFIG_STRING, "\"fast\"",
     "mode of the test tier", 0, 0, 0, k_choices},
};

static const zhost_plugin_descriptor k_descriptor = {
#ifdef VARIANT_SMALL_DESC
    16,
#else
    sizeof(zhost_plugin_descriptor),
#endif
    NULL,
    VARIANT_NAME,
    "1.2.3",
    "negotiation-matrix\ttest plugin",
    ZHOST_KIND_OFFLOAD,
    k_provides,
    NULL,
    NULL,
    k_keys,
    2,
    ZHOST_PLUGIN_FLAG_HOT_SWAPPABLE | ZHOST_PLUGIN_FLAG_TIER_STORES,
    NULL};

static zhost_status* negotiate(zhost_negotiation* io) {
  (void)&k_descriptor; /* referenced by every variant, used by most */
  (void)&k_api;
  if (io == NULL || io->struct_size < ZHOST_NEGOTIATION_SIZE || io->host_abi_major != 1) return NULL;
  g_host = io->host;
#if defined(VARIANT_CRASHES)
  *g_nowhere = 1;
#elif defined(VARIANT_HANGS)
  {
    volatile int spin = 1;
    while (spin) {
    }
  }
#endif
#ifdef VARIANT_REFUSES
  return io->host->status_create(ZHOST_ERR_UNSUPPORTED, "this test plugin refuses every host");
#else
#if defined(VARIANT_OLD_MINOR)
  /* An old plugin knows only the 1.0 prefix of the host table; it checks what it reads. */
  if (io->host->struct_size < ZHOST_HOST_SERVICES_MIN_SIZE)
    return io->host->status_create(ZHOST_ERR_VERSION, "host too old");
  io->plugin_abi_minor = 0;
  io->plugin_min_host_minor = 0;
#elif defined(VARIANT_NEEDS_NEWER)
  io->plugin_abi_minor = ZHOST_ABI_MINOR + 1;
  io->plugin_min_host_minor = ZHOST_ABI_MINOR + 1;
#else
  io->plugin_abi_minor = ZHOST_ABI_MINOR;
  io->plugin_min_host_minor = ZHOST_ABI_MINOR;
#endif
  io->descriptor = &k_descriptor;
  io->api = &k_api;
  return NULL;
#endif
}

#ifdef VARIANT_CTOR_CRASHES
__attribute__((constructor)) static void crash_on_load(void) { raise(SIGSEGV); }
#endif

#if defined(VARIANT_WRONG_MAJOR)
ZHOST_EXPORT zhost_status* zhost_plugin_v0(zhost_negotiation* io) { return negotiate(io); }
#elif defined(VARIANT_NO_ENTRY)
/* Exports a symbol, just not the entry. */
ZHOST_EXPORT int not_a_zhost_entry(void) { return negotiate(NULL) == NULL; }
#else
ZHOST_EXPORT zhost_status* zhost_plugin_v1(zhost_negotiation* io) { return negotiate(io); }
#endif
