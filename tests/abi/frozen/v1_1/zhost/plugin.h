/* zhost/plugin.h: how a plugin is found, negotiated, created and destroyed.
 *
 * A plugin is a shared object exporting one C function per ABI major it speaks:
 *
 *     ZHOST_EXPORT zhost_status *zhost_plugin_v1(zhost_negotiation *io);
 *
 * Negotiation: the host fills the `host_*` fields and calls the entry. The plugin answers with the minor
 * of the headers it was built against, the oldest host minor it can run on, its static descriptor and
 * its lifecycle table, or with a status explaining why it refuses. The entry must have no side effects
 * (no threads, no allocation that outlives the call, no I/O): the host calls it just to list plugins.
 *
 * Compatibility rule, checked by the host: host_abi_minor >= plugin_min_host_minor. A newer host serves
 * an older plugin by reading only the prefix of each struct that the plugin's struct_size covers; an
 * older host refuses a plugin that needs a newer minor, naming both versions.
 *
 * Lifecycle (one state machine per loaded plugin, kept by the host):
 *   found -> negotiated -> [check_config] -> [probe] -> created -> destroyed
 * The host never unloads (dlclose) a plugin's code while the process runs: hot-swapping destroys an
 * instance and creates another, so thread-local storage and atexit handlers in plugins stay safe.
 *
 * Threading contract: the host calls create/destroy and every capability-table function of one
 * instance from one thread at a time, unless the descriptor sets ZHOST_PLUGIN_FLAG_THREAD_SAFE. An
 * instance may start its own threads; destroy() must join all of them before it returns. C++ exceptions
 * must never cross this boundary (the C++ helpers in zhost/cpp/ turn them into statuses).
 */
#ifndef ZHOST_PLUGIN_H
#define ZHOST_PLUGIN_H

#include "zhost/core.h"
#include "zhost/descriptor.h"
#include "zhost/host.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zhost_plugin_instance zhost_plugin_instance; /* opaque, owned by the plugin */
struct zhost_partition_api;
struct zhost_storage_api;
struct zhost_optimizer_tier_api;
struct zhost_collective_api;

typedef struct zhost_plugin_create_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  const zhost_host_services* host; /* valid until destroy() returns */
  zhost_host_context* ctx;         /* valid until destroy() returns */
  /* in: for an offload tier, the one zhost_tier_role this instance serves when the job created an instance per
   * storing role (docs/abi.md "One instance per storing role"); 0 when the instance serves every role the job
   * gave its plugin, or when it is no tier */
  uint32_t tier_role;
  zhost_plugin_instance* instance; /* out: the plugin's state, handed back to every call */
} zhost_plugin_create_args;
#define ZHOST_PLUGIN_CREATE_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_plugin_create_args, instance)
#define ZHOST_PLUGIN_CREATE_ARGS_MIN_SIZE ZHOST_PLUGIN_CREATE_ARGS_SIZE /* since 1.0 */

typedef struct zhost_probe_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  const zhost_host_services* host; /* statuses, log, config lookups; valid during the call */
  zhost_host_context* ctx;         /* valid during the call */
} zhost_probe_args;
#define ZHOST_PROBE_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_probe_args, ctx)
#define ZHOST_PROBE_ARGS_MIN_SIZE ZHOST_PROBE_ARGS_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_probe_args, ZHOST_PROBE_ARGS_SIZE);
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_plugin_create_args, ZHOST_PLUGIN_CREATE_ARGS_SIZE);

/* In: the job as `zhost config check` and `zhost run` see it before any rank starts, for check_config
 * below (docs/abi.md "Config checks"). The host owns the struct and every pointer in it; all are valid during
 * the call only. */
typedef struct zhost_config_check_args {
  size_t struct_size;
  const zhost_ext_header* ext;
  const zhost_host_services* host; /* statuses, log, config lookups; no buffers, collectives, params or copies */
  zhost_host_context* ctx;         /* config_get answers the resolved values of the keys the plugin declares */
  /* bit (1u << role) for each zhost_tier_role the job gives this plugin at start; 0 for no tier, and for a
   * storing tier the job may only swap in later (Note [Storage swap]): then check the settings given */
  uint32_t tier_roles;
  uint32_t job_tier_roles; /* bit (1u << role) for each zhost_tier_role some tier serves in this job at start */
  /* why the job chose the plugin, e.g. "zero.offload_optimizer.device = \"nvme\"" (NUL-terminated) */
  const char* chosen_for;
  int64_t world_size;  /* the job's ranks; 0 when not known (config check without --nproc) */
  int64_t local_ranks; /* of those, the ranks on this machine; 0 when not known */
  /* for the tiers serving ZHOST_TIER_FOR_OPTIMIZER_STORAGE and ZHOST_TIER_FOR_PARAMS: the bytes this machine's
   * ranks will keep there once every state is written (a lower bound, Note [Storage space at start]); 0 when
   * not known, or when the user turned the check off (run.memory_check = false) */
  uint64_t optimizer_storage_bytes;
  uint64_t params_storage_bytes;
  /* the model's parameters as zhost_partition_setup will list them (registration order): the elements of
   * each and its owning block, arrays of num_params; 0 and NULL when not known */
  uint32_t num_params;
  uint32_t num_blocks;
  const int64_t* param_numels;
  const int32_t* param_blocks;
  /* out: the config key a refusal is about (the host prints its file line); NULL: the key that chose the
   * plugin. A string that lives at least until the call returns and the host has read it (a literal) */
  const char* key;
} zhost_config_check_args;
#define ZHOST_CONFIG_CHECK_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_config_check_args, key)
#define ZHOST_CONFIG_CHECK_ARGS_MIN_SIZE ZHOST_CONFIG_CHECK_ARGS_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_config_check_args, ZHOST_CONFIG_CHECK_ARGS_SIZE);

typedef struct zhost_plugin_api {
  size_t struct_size;
  const zhost_ext_header* ext;
  /* Optional (may be NULL): can this plugin run here (CPU features, CUDA present)? Called after
   * negotiation, before create; a non-NULL status with ZHOST_ERR_UNSUPPORTED explains why not. */
  zhost_status* (*probe)(const zhost_probe_args* args);
  /* Optional (may be NULL): does the job's config suit this plugin (its folders, its sizes against the
   * model)? Called by `zhost config check` and `zhost run` before any rank starts, once per chosen plugin
   * (not per instance), and by each rank before create; no instance exists. Must not keep anything after it
   * returns (files it tries, it removes). A non-NULL status with ZHOST_ERR_CONFIG refuses the config: the host
   * prints its message as one config error line at args->key; ZHOST_ERR_UNSUPPORTED says the plugin cannot
   * run here. */
  zhost_status* (*check_config)(zhost_config_check_args* args);
  zhost_status* (*create)(zhost_plugin_create_args* args);
  void (*destroy)(zhost_plugin_instance* instance); /* joins the instance's threads; cannot fail */
  /* The tables of the descriptor's kind: `partition` for ZHOST_KIND_PARTITION, `collective` for
   * ZHOST_KIND_COLLECTIVE; for ZHOST_KIND_OFFLOAD `storage` when the tier stores and `optimizer` when it
   * computes (ZHOST_PLUGIN_FLAG_TIER_STORES / _COMPUTES), at least one. The others are NULL. */
  const struct zhost_partition_api* partition;
  const struct zhost_storage_api* storage;
  const struct zhost_optimizer_tier_api* optimizer;
  const struct zhost_collective_api* collective;
} zhost_plugin_api;
#define ZHOST_PLUGIN_API_SIZE ZHOST_STRUCT_SIZE(zhost_plugin_api, collective)
#define ZHOST_PLUGIN_API_MIN_SIZE ZHOST_PLUGIN_API_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_plugin_api, ZHOST_PLUGIN_API_SIZE);

typedef struct zhost_negotiation {
  size_t struct_size;
  const zhost_ext_header* ext;
  /* in, from the host */
  uint32_t host_abi_major;
  uint32_t host_abi_minor;
  /* owned by the host, valid until the process ends (a plugin may keep it, as the C++ helpers do, to
   * create statuses outside an instance); its per-job members (collectives, params, copies) are NULL:
   * an instance uses the table create() hands it. Note [Lifetimes] in docs/abi.md */
  const zhost_host_services* host;
  /* out, from the plugin */
  uint32_t plugin_abi_minor;                 /* ZHOST_ABI_MINOR of the headers it was built with */
  uint32_t plugin_min_host_minor;            /* oldest host minor it supports */
  const zhost_plugin_descriptor* descriptor; /* static */
  const zhost_plugin_api* api;               /* static */
} zhost_negotiation;
#define ZHOST_NEGOTIATION_SIZE ZHOST_STRUCT_SIZE(zhost_negotiation, api)
#define ZHOST_NEGOTIATION_MIN_SIZE ZHOST_NEGOTIATION_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_negotiation, ZHOST_NEGOTIATION_SIZE);

typedef zhost_status* (*zhost_plugin_entry_v1_fn)(zhost_negotiation* io);

#ifdef __cplusplus
}
#endif
#endif /* ZHOST_PLUGIN_H */
