/* tests/abi/frozen_tier.c: a small offload tier written in C99 against ONLY one frozen copy of a released SDK's
 * headers (tests/abi/frozen/vMAJOR_MINOR, picked by the include path), so that the test can load what a plugin
 * built for that release really looks like into the current host. It keeps buffers in host memory by key
 * (store/load/drop), reports its memory, exports and imports its state, and, at create(), allocates a host
 * buffer and asks tier_for() for a tier: host services of the release it was built for.
 * Built per release as zhost_frozen_tier_vMAJOR_MINOR.so (tests/abi/CMakeLists.txt). */
#include <stdlib.h>
#include <string.h>

#include "zhost/zhost.h"

#if ZHOST_ABI_MAJOR == 1 && ZHOST_ABI_MINOR == 0
#define TIER_NAME "frozen_tier_v1_0"
#elif ZHOST_ABI_MAJOR == 1 && ZHOST_ABI_MINOR == 1
#define TIER_NAME "frozen_tier_v1_1"
#else
#error "built against headers of an unexpected release"
#endif

static const zhost_host_services* g_host;

typedef struct entry {
  uint64_t key;
  void* bytes;
  size_t len;
  struct entry* next;
} entry;

typedef struct tier {
  const zhost_host_services* host;
  zhost_host_context* ctx;
  entry* entries;
  zhost_buffer_handle scratch; /* a host buffer held for the instance's life */
} tier;

static zhost_status* fail(zhost_status_code code, const char* message) { return g_host->status_create(code, message); }

static size_t tensor_bytes(const DLTensor* t) {
  size_t n = (size_t)(t->dtype.bits / 8) * t->dtype.lanes;
  int32_t i;
  for (i = 0; i < t->ndim; ++i) n *= (size_t)t->shape[i];
  return n;
}

static entry* find(tier* self, uint64_t key) {
  entry* e;
  for (e = self->entries; e; e = e->next)
    if (e->key == key) return e;
  return NULL;
}

static zhost_status* put(tier* self, uint64_t key, const void* bytes, size_t len) {
  entry* e = find(self, key);
  if (!e) {
    e = (entry*)calloc(1, sizeof(entry));
    if (!e) return fail(ZHOST_ERR_OUT_OF_MEMORY, "frozen tier: out of memory");
    e->key = key;
    e->next = self->entries;
    self->entries = e;
  }
  free(e->bytes);
  e->bytes = malloc(len ? len : 1);
  if (!e->bytes) return fail(ZHOST_ERR_OUT_OF_MEMORY, "frozen tier: out of memory");
  memcpy(e->bytes, bytes, len);
  e->len = len;
  return NULL;
}

static zhost_status* tier_store(zhost_plugin_instance* instance, zhost_tier_io_args* args) {
  if (!args || args->struct_size < ZHOST_TIER_IO_ARGS_SIZE || !args->data || args->data->device.device_type != kDLCPU)
    return fail(ZHOST_ERR_INVALID_ARGUMENT, "frozen tier: store needs io args with host data");
  args->event = NULL; /* done at once */
  return put((tier*)instance, args->key, (const char*)args->data->data + args->data->byte_offset,
             tensor_bytes(args->data));
}

static zhost_status* tier_load(zhost_plugin_instance* instance, zhost_tier_io_args* args) {
  entry* e;
  if (!args || args->struct_size < ZHOST_TIER_IO_ARGS_SIZE || !args->data || args->data->device.device_type != kDLCPU)
    return fail(ZHOST_ERR_INVALID_ARGUMENT, "frozen tier: load needs io args with host data");
  e = find((tier*)instance, args->key);
  if (!e) return fail(ZHOST_ERR_INVALID_ARGUMENT, "frozen tier: no buffer under that key");
  if (e->len != tensor_bytes(args->data)) return fail(ZHOST_ERR_INVALID_ARGUMENT, "frozen tier: size differs");
  memcpy((char*)args->data->data + args->data->byte_offset, e->bytes, e->len);
  args->event = NULL;
  return NULL;
}

/* wait, test, order_compute_after: transfers complete inside store and load */
static zhost_status* tier_event(zhost_plugin_instance* instance, zhost_tier_event_args* args) {
  (void)instance;
  args->done = 1;
  return NULL;
}

static zhost_status* drop_key(tier* self, uint64_t key) {
  entry** at;
  for (at = &self->entries; *at; at = &(*at)->next) {
    if ((*at)->key == key) {
      entry* gone = *at;
      *at = gone->next;
      free(gone->bytes);
      free(gone);
      return NULL;
    }
  }
  return NULL;
}

/* State stream: for each buffer, key, length, bytes. */
static zhost_status* tier_drop(zhost_plugin_instance* instance, zhost_tier_key_args* args) {
  return drop_key((tier*)instance, args->key);
}

static zhost_status* tier_export(zhost_plugin_instance* instance, zhost_tier_stream_args* args) {
  zhost_state_writer write = args->write;
  void* user = args->user;
  entry* e;
  for (e = ((tier*)instance)->entries; e; e = e->next) {
    uint64_t len = e->len;
    if (write(user, &e->key, sizeof(e->key)) || write(user, &len, sizeof(len)) || write(user, e->bytes, e->len))
      return fail(ZHOST_ERR_IO, "frozen tier: export stopped");
  }
  return NULL;
}

static int read_all(zhost_state_reader read, void* user, void* bytes, size_t len) {
  size_t done = 0;
  while (done < len) {
    int64_t n = read(user, (char*)bytes + done, len - done);
    if (n <= 0) return done == 0 && n == 0 ? 0 : -1;
    done += (size_t)n;
  }
  return 1;
}

static zhost_status* tier_import(zhost_plugin_instance* instance, zhost_tier_stream_args* args) {
  zhost_state_reader read = args->read;
  void* user = args->user;
  for (;;) {
    uint64_t key, len;
    void* bytes;
    zhost_status* status;
    int got = read_all(read, user, &key, sizeof(key));
    if (got == 0) return NULL;
    if (got < 0 || read_all(read, user, &len, sizeof(len)) != 1) return fail(ZHOST_ERR_IO, "frozen tier: bad state");
    bytes = malloc(len ? len : 1);
    if (!bytes) return fail(ZHOST_ERR_OUT_OF_MEMORY, "frozen tier: out of memory");
    if (len && read_all(read, user, bytes, len) != 1) {
      free(bytes);
      return fail(ZHOST_ERR_IO, "frozen tier: truncated state");
    }
    status = put((tier*)instance, key, bytes, len);
    free(bytes);
    if (status) return status;
  }
}

static zhost_status* tier_memory(zhost_plugin_instance* instance, zhost_tier_memory* out) {
  entry* e;
  uint64_t total = 0;
  for (e = ((tier*)instance)->entries; e; e = e->next) total += e->len;
  out->host_bytes = total;
  out->storage_bytes = 0;
  return NULL;
}

static const zhost_storage_api k_storage = {sizeof(zhost_storage_api),
                                            NULL,
                                            tier_store,
                                            tier_load,
                                            tier_event,
                                            tier_event,
                                            tier_event,
                                            tier_drop,
                                            tier_export,
                                            tier_import,
                                            tier_memory}; /* no optimizer */

static zhost_status* create(zhost_plugin_create_args* args) {
  zhost_buffer_alloc_args buffer;
  zhost_tier_ref ref;
  zhost_status* status;
  tier* self = (tier*)calloc(1, sizeof(tier));
  if (!self) return fail(ZHOST_ERR_OUT_OF_MEMORY, "frozen tier: out of memory");
  self->host = args->host;
  self->ctx = args->ctx;
  /* Host services, through structs this plugin writes itself. */
  memset(&buffer, 0, sizeof(buffer));
  buffer.struct_size = sizeof(buffer);
  buffer.memory = ZHOST_MEMORY_HOST;
  buffer.size_bytes = 4096;
  buffer.label = TIER_NAME " scratch";
  if ((status = args->host->buffer_alloc(args->ctx, &buffer)) != NULL) {
    free(self);
    return status;
  }
  self->scratch = buffer.handle;
  memset(&ref, 0, sizeof(ref));
  ref.struct_size = sizeof(ref);
  ref.role = ZHOST_TIER_FOR_OPTIMIZER;
  if ((status = args->host->tier_for(args->ctx, &ref)) != NULL) {
    free(self);
    return status;
  }
  {
    zhost_log_args line;
    memset(&line, 0, sizeof(line));
    line.struct_size = sizeof(line);
    line.level = ZHOST_LOG_INFO;
    line.message = TIER_NAME " created";
    args->host->log(args->ctx, &line);
  }
  args->instance = (zhost_plugin_instance*)self;
  return NULL;
}

static void destroy(zhost_plugin_instance* instance) {
  tier* self = (tier*)instance;
  zhost_buffer_release_args release;
  zhost_status* status;
  while (self->entries) drop_key(self, self->entries->key);
  memset(&release, 0, sizeof(release));
  release.struct_size = sizeof(release);
  release.handle = self->scratch;
  status = self->host->buffer_release(self->ctx, &release);
  if (status) self->host->status_destroy(status);
  free(self);
}

static const zhost_plugin_api k_api = {
    sizeof(zhost_plugin_api), NULL, NULL, NULL, create, destroy, NULL, &k_storage, NULL, NULL};

static const char* const k_provides[] = {"offload:" TIER_NAME, NULL};
static const zhost_config_key k_keys[] = {
    {sizeof(zhost_config_key), NULL, "zero.offload_optimizer." TIER_NAME "_depth", ZHOST_CONFIG_INT, "2",
     "queue depth of the frozen test tier", 1, 8, 1, NULL},
};

static const zhost_plugin_descriptor k_descriptor = {sizeof(zhost_plugin_descriptor),
                                                     NULL,
                                                     TIER_NAME,
                                                     "0.0.1",
                                                     "tier built against frozen SDK headers",
                                                     ZHOST_KIND_OFFLOAD,
                                                     k_provides,
                                                     NULL,
                                                     NULL,
                                                     k_keys,
                                                     1,
                                                     ZHOST_PLUGIN_FLAG_TIER_STORES};

ZHOST_EXPORT zhost_status* zhost_plugin_v1(zhost_negotiation* io) {
  if (io == NULL || io->struct_size < ZHOST_NEGOTIATION_SIZE || io->host_abi_major != ZHOST_ABI_MAJOR) return NULL;
  g_host = io->host;
  io->plugin_abi_minor = ZHOST_ABI_MINOR;
  io->plugin_min_host_minor = ZHOST_ABI_MINOR;
  io->descriptor = &k_descriptor;
  io->api = &k_api;
  return NULL;
}
