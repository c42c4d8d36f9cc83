/* zhost/descriptor.h: the static self-description every plugin hands the host at negotiation.
 *
 * A descriptor is plain data: the host reads it, prints it (`zhost plugins`), resolves requirements and
 * validates configuration with it, all before any plugin code beyond the entry function runs.
 *
 * Lifetime: every pointer in a descriptor (strings, arrays, the descriptor itself) must stay valid for as
 * long as the plugin's shared object is loaded; in practice they point to static storage.
 *
 * Capability names are short strings "<area>:<item>", e.g. "partition:stage2", "offload:cpu",
 * "offload:nvme", "collective:qwz". The host derives what a config needs in the same vocabulary
 * (zero.stage = 2 needs "partition:stage2"); see docs/abi.md for the registered names.
 */
#ifndef ZHOST_DESCRIPTOR_H
#define ZHOST_DESCRIPTOR_H

#include "zhost/core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum zhost_capability_kind {
  ZHOST_KIND_PARTITION = 1, /* where model states live and when collectives move them (stage1/2/3) */
  ZHOST_KIND_OFFLOAD = 2,   /* a storage tier outside device memory (cpu, nvme, third-party) */
  ZHOST_KIND_COLLECTIVE = 3 /* transforms how chosen collectives travel (quantized, hierarchical) */
} zhost_capability_kind;

typedef enum zhost_config_type {
  ZHOST_CONFIG_BOOL = 1,
  ZHOST_CONFIG_INT = 2,   /* int64; TOML integers, or floats with an integral value such as 5e8 */
  ZHOST_CONFIG_FLOAT = 3, /* double */
  ZHOST_CONFIG_STRING = 4 /* UTF-8; may be restricted to `choices` */
} zhost_config_type;

/* One configuration key a plugin accepts. Keys are dotted paths relative to the root of the TOML file,
 * e.g. "zero.reduce_bucket_size" or "zero.offload_optimizer.pin_memory". A key is declared in one place:
 * a plugin that reads a key the host or another plugin declares lists it in reads_keys instead (stage2
 * reads stage0's zero.reduce_bucket_size). The host accepts a key declared twice when type and default
 * agree, but then two doc lines describe it. */
/* An element of the descriptor's config_keys array: it never grows (docs/abi.md, "Versioning rule"). */
typedef struct zhost_config_key {
  size_t struct_size;
  const zhost_ext_header* ext;
  const char* key; /* dotted path, required */
  zhost_config_type type;
  const char* default_value; /* TOML literal text: "true", "500000000", "\"cpu\""; NULL = required */
  const char* doc;           /* one line, shown by `zhost plugins` and in errors */
  double min_value;          /* numeric range, inclusive; ignored unless has_range */
  double max_value;
  int32_t has_range;
  const char* const* choices; /* STRING only: NULL-terminated allowed values, or NULL for any */
} zhost_config_key;
#define ZHOST_CONFIG_KEY_SIZE ZHOST_STRUCT_SIZE(zhost_config_key, choices)
#define ZHOST_CONFIG_KEY_MIN_SIZE ZHOST_CONFIG_KEY_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_config_key, ZHOST_CONFIG_KEY_SIZE);

/* Descriptor flags. */
#define ZHOST_PLUGIN_FLAG_HOT_SWAPPABLE (1u << 0) /* supports export/import of state while a job runs */
#define ZHOST_PLUGIN_FLAG_THREAD_SAFE (1u << 1)   /* instance calls may come from several threads at once */
#define ZHOST_PLUGIN_FLAG_NEEDS_CUDA (1u << 2)    /* refuses to start without a CUDA device */
/* partition: grad_ready() takes each gradient (copies or reduces it); the host frees the parameter's
 * .grad right after the call, so gradients never pile up in full size (ZeRO stage 2 and 3). */
#define ZHOST_PLUGIN_FLAG_TAKES_GRADIENTS (1u << 3)
/* partition: the plugin partitions the parameters themselves (ZeRO stage 3). The host then builds the model
 * unmaterialised (parameters have their shapes but no storage: no rank ever holds the whole model) and
 * leaves every parameter's storage to the plugin, through host services `params` (zhost/host.h): the
 * plugin fills its shards from params->initial_values, and materialises a block's parameters before the
 * block runs (pre_forward, pre_backward). */
#define ZHOST_PLUGIN_FLAG_PARTITIONS_PARAMETERS (1u << 4)
/* Offload tiers: what the tier can do (docs/abi.md "Tier roles"). The host serves a role only with a tier that
 * declares it, and refuses a config that asks otherwise at `zhost config check`; the tables a tier fills
 * (zhost_plugin_api.storage, .optimizer) must match its flags. */
#define ZHOST_PLUGIN_FLAG_TIER_STORES (1u << 5)   /* fills zhost/storage.h's table (optimizer storage, params) */
#define ZHOST_PLUGIN_FLAG_TIER_COMPUTES (1u << 6) /* fills zhost/optimizer.h's table: runs the optimizer */
/* computing: can keep its groups' master weights and optimizer states in a storage tier
 * (tier_for(ZHOST_TIER_FOR_OPTIMIZER_STORAGE)), loading them for each step */
#define ZHOST_PLUGIN_FLAG_TIER_USES_STORAGE (1u << 7)
/* storing, named as zero.offload_optimizer.device: it keeps the optimizer's states while the CPU tier
 * ("offload:cpu") steps them, DeepSpeed's meaning of its device = "nvme" (Note [Storing tiers by their
 * descriptors], host/plugins/resolver.cpp). Without it such a tier is refused as the optimizer's device. */
#define ZHOST_PLUGIN_FLAG_TIER_DEVICE_STORES (1u << 8)
/* storing: keeps what it stores outside host memory (files on a disk), so the host's memory check leaves it out
 * (the tier's check_config weighs its disk) */
#define ZHOST_PLUGIN_FLAG_TIER_OUTSIDE_HOST_MEMORY (1u << 9)

typedef struct zhost_plugin_descriptor {
  size_t struct_size;
  const zhost_ext_header* ext;
  const char* name;    /* unique plugin name, [a-z0-9_]+, e.g. "stage2" */
  const char* version; /* the plugin's own semantic version, e.g. "0.3.1" */
  const char* summary; /* one line */
  zhost_capability_kind kind;
  const char* const* provides;         /* NULL-terminated capability names; at least one */
  const char* const* requires_caps;    /* NULL-terminated capabilities that must be present; may be NULL */
  const char* const* conflicts;        /* NULL-terminated capabilities that must be absent; may be NULL */
  const zhost_config_key* config_keys; /* array of num_config_keys entries; may be NULL when 0 */
  size_t num_config_keys;
  uint64_t flags; /* ZHOST_PLUGIN_FLAG_* */
  /* Keys this plugin reads but does not declare: each is declared once, by the host or by one other plugin,
   * which gives its type, default, range and doc (Note [Each key declared once], host/job/job_setup.cpp).
   * config_get answers them as it answers the plugin's own keys. NULL-terminated; may be NULL. */
  const char* const* reads_keys;
} zhost_plugin_descriptor;
#define ZHOST_PLUGIN_DESCRIPTOR_SIZE ZHOST_STRUCT_SIZE(zhost_plugin_descriptor, reads_keys)
#define ZHOST_PLUGIN_DESCRIPTOR_MIN_SIZE ZHOST_PLUGIN_DESCRIPTOR_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_plugin_descriptor, ZHOST_PLUGIN_DESCRIPTOR_SIZE);

#ifdef __cplusplus
}
#endif
#endif /* ZHOST_DESCRIPTOR_H */
