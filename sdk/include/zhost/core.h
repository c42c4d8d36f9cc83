/* zhost/core.h: the foundation of zhost's plugin C ABI.
 *
 * What lives here: the ABI version numbers, the export/visibility macros, the rules every ABI struct
 * follows (size first, then an extension chain), and status objects (NULL means success).
 *
 * Versioning (majors in the entry symbol's name, minors that only append, struct_size first): docs/abi.md,
 * section 1. Every struct has ZHOST_<NAME>_SIZE, its full size in these headers, and ZHOST_<NAME>_MIN_SIZE,
 * its size in the minor that introduced it (1.0 for every struct today): a reader accepts a struct from its
 * minimum and reads fields appended after it only through ZHOST_HAS_FIELD. That rule, and the test that builds
 * plugins against the frozen copy of each released version, are written down once: docs/abi.md, "Versioning
 * rule".
 *
 * Call shape (docs/abi.md "One args struct per call"): every function of every table takes its handle (the
 * plugin's instance, or the host's context) and one args struct, so that a call grows by fields, never by new
 * functions. The exceptions never grow: the status functions below, clock_ns, destroy, and the two handle-only
 * queries abort_requested and device_memory_is_separate.
 *
 * Threading: nothing in this header holds state; status functions live in the host-services table and
 * are thread-safe.
 */
#ifndef ZHOST_CORE_H
#define ZHOST_CORE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- version -------------------------------------------------------------------------------------- */
/* 1.0 is frozen (tests/abi/frozen/v1_0 holds its headers): later 1.x minors only append (docs/abi.md, section
 * 1). The history of every version is docs/abi.md's "Version history", which a test checks against these
 * numbers. */
#define ZHOST_ABI_MAJOR 1
#define ZHOST_ABI_MINOR 1

/* The exported entry symbol for a major version. Hosts probe the newest major they know first. */
#define ZHOST_ENTRY_SYMBOL_V1 "zhost_plugin_v1"

/* ---- visibility ------------------------------------------------------------------------------------ */
#if defined(_WIN32)
#define ZHOST_EXPORT __declspec(dllexport)
#else
#define ZHOST_EXPORT __attribute__((visibility("default")))
#endif

/* ---- size-first structs ---------------------------------------------------------------------------- */
/* Size of `type` up to and including `last_field`: the size a reader needs for that field to exist. */
#define ZHOST_STRUCT_SIZE(type, last_field) (offsetof(type, last_field) + sizeof(((type*)0)->last_field))

/* True when a struct written by someone else (its struct_size) contains `field` of `type`. */
#define ZHOST_HAS_FIELD(ptr, type, field) ((ptr) != NULL && (ptr)->struct_size >= ZHOST_STRUCT_SIZE(type, field))

#if defined(__cplusplus)
#define ZHOST_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define ZHOST_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

/* Each ABI struct defines FOO_SIZE via ZHOST_STRUCT_SIZE(foo, its_last_field) and asserts it equals
 * sizeof(foo) modulo tail padding. Forgetting to move FOO_SIZE to a newly appended field fails here. */
#define ZHOST_ASSERT_STRUCT_COMPLETE(type, size_macro)             \
  ZHOST_STATIC_ASSERT(sizeof(type) - (size_macro) < sizeof(void*), \
                      #size_macro " does not name the last field of " #type)

/* ---- extension chain ------------------------------------------------------------------------------- */
/* Optional features hang off any struct's `ext` as a singly linked list of typed headers. A reader skips
 * types it does not know. Extension types are registered in docs/abi.md; third parties use values with
 * the top bit set. */
typedef struct zhost_ext_header {
  size_t struct_size;                  /* sizeof the full extension struct */
  uint32_t type;                       /* ZHOST_EXT_* */
  const struct zhost_ext_header* next; /* borrowed; NULL ends the chain */
} zhost_ext_header;
#define ZHOST_EXT_HEADER_SIZE ZHOST_STRUCT_SIZE(zhost_ext_header, next)
#define ZHOST_EXT_HEADER_MIN_SIZE ZHOST_EXT_HEADER_SIZE /* since 1.0 */
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_ext_header, ZHOST_EXT_HEADER_SIZE);

#define ZHOST_EXT_THIRD_PARTY_BIT 0x80000000u

/* Walks `chain` for the first extension of `type`; NULL when absent. */
static inline const zhost_ext_header* zhost_ext_find(const zhost_ext_header* chain, uint32_t type) {
  for (; chain != NULL; chain = chain->next)
    if (chain->type == type) return chain;
  return NULL;
}

/* ---- status objects -------------------------------------------------------------------------------- */
/* A status is an opaque, heap-allocated error: NULL means success. Whoever receives a non-NULL status owns
 * it and must release it with host->status_destroy(). Plugins create statuses only through
 * host->status_create() so that one allocator owns them all. */
typedef struct zhost_status zhost_status;

typedef enum zhost_status_code {
  ZHOST_OK = 0,
  ZHOST_ERR_INVALID_ARGUMENT = 1, /* a caller passed something malformed */
  ZHOST_ERR_CONFIG = 2,           /* configuration value rejected */
  ZHOST_ERR_UNSUPPORTED = 3,      /* valid request this plugin or host cannot serve */
  ZHOST_ERR_OUT_OF_MEMORY = 4,    /* an allocation failed: host, pinned or device */
  ZHOST_ERR_IO = 5,               /* file or device I/O failed (disk full included) */
  ZHOST_ERR_COMM = 6,             /* a collective failed or a peer rank is gone */
  ZHOST_ERR_TIMEOUT = 7,          /* waited longer than allowed */
  ZHOST_ERR_ABORTED = 8,          /* the job is stopping: the abort flag was raised */
  ZHOST_ERR_VERSION = 9,          /* ABI or state-format version mismatch */
  ZHOST_ERR_INTERNAL = 10         /* a bug: an invariant broke */
} zhost_status_code;

#ifdef __cplusplus
}
#endif
#endif /* ZHOST_CORE_H */
