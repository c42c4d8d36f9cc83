// plugins/quant_zeropp/wire.hpp: the plugin's calls into the host's collectives for the wire part of a
// served collective (Note [Collective transforms]), synchronous, on byte buffers, carrying the intent and
// block of the collective they serve (for traces); and small DLTensor helpers.
#pragma once

#include <dlpack/dlpack.h>

#include <cstdint>

#include "zhost/collective.h"
#include "zhost/cpp/plugin.hpp"

namespace zhost::zeropp::wire {

int world_size(const sdk::Host& host, zhost_group* group);
int rank(const sdk::Host& host, zhost_group* group);
int64_t numel(const DLTensor& view);
void* data(const DLTensor& view);  // data + byte_offset
// Throws PluginError(ZHOST_ERR_INVALID_ARGUMENT) with `what` unless `ok`.
void require(bool ok, const char* what);

// Equal-split collectives on `group` (NULL: the whole job), as `serving` does them.
void all_gather(const sdk::Host& host, const zhost_collective_args& serving, const DLTensor& send, DLTensor& recv);
void all_to_all(const sdk::Host& host, const zhost_collective_args& serving, zhost_group* group, const DLTensor& send,
                DLTensor& recv);

}  // namespace zhost::zeropp::wire
