/* zhost/offload.h: the capability table of an offload tier (host memory, NVMe, third-party tiers).
 *
 * STATUS: draft of ABI 0.x, completed by the CPU-offload and NVMe-offload work.
 *
 * A tier stores flat buffers outside device memory and moves them asynchronously. Buffers are named by a
 * 64-bit key chosen by the caller (e.g. sub-group id and state kind). A tier that can compute (the CPU
 * tier) also runs the optimizer where the states live. Tiers export and import their whole state through
 * a byte stream, which is what lets the host hot-swap one tier for another in a running job.
 */
#ifndef ZHOST_OFFLOAD_H
#define ZHOST_OFFLOAD_H

#include <dlpack/dlpack.h>

#include "zhost/core.h"
#include "zhost/plugin.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct zhost_tier_event zhost_tier_event; /* completion of an asynchronous tier operation */

typedef struct zhost_tier_io_args {
    size_t struct_size;
    const zhost_ext_header *ext;
    uint64_t key;             /* caller-chosen buffer name */
    DLTensor *data;           /* source (store) or destination (load); borrowed until the event completes */
    zhost_tier_event *event;  /* out: wait with wait_event() */
} zhost_tier_io_args;
#define ZHOST_TIER_IO_ARGS_SIZE ZHOST_STRUCT_SIZE(zhost_tier_io_args, event)
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_tier_io_args, ZHOST_TIER_IO_ARGS_SIZE);

/* Writes a chunk of exported state; returns non-zero to stop the export. */
typedef int32_t (*zhost_state_writer)(void *user, const void *bytes, size_t len);
/* Reads up to `capacity` bytes of state to import; returns bytes read, 0 at the end, negative on error. */
typedef int64_t (*zhost_state_reader)(void *user, void *bytes, size_t capacity);

typedef struct zhost_offload_api {
    size_t struct_size;
    const zhost_ext_header *ext;
    zhost_status *(*store)(zhost_plugin_instance *self, zhost_tier_io_args *args);
    zhost_status *(*load)(zhost_plugin_instance *self, zhost_tier_io_args *args);
    zhost_status *(*wait_event)(zhost_plugin_instance *self, zhost_tier_event *event); /* frees the event */
    zhost_status *(*drop)(zhost_plugin_instance *self, uint64_t key);
    zhost_status *(*export_state)(zhost_plugin_instance *self, zhost_state_writer write, void *user);
    zhost_status *(*import_state)(zhost_plugin_instance *self, zhost_state_reader read, void *user);
} zhost_offload_api;
#define ZHOST_OFFLOAD_API_SIZE ZHOST_STRUCT_SIZE(zhost_offload_api, import_state)
ZHOST_ASSERT_STRUCT_COMPLETE(zhost_offload_api, ZHOST_OFFLOAD_API_SIZE);

#ifdef __cplusplus
}
#endif
#endif /* ZHOST_OFFLOAD_H */
