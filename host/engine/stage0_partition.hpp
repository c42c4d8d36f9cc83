// host/engine/stage0_partition.hpp: stage 0, plain data parallelism, as the host's own built-in
// partition plugin ("stage0", provides partition:stage0). It implements the same C ABI contract as the
// ZeRO plugins (zhost/partition.h) and reaches the network only through the host's collectives table,
// so the contract is exercised even when no plugin file is loaded.
#pragma once

namespace zhost::engine {

// Registers the built-in with the plugin host (idempotent). Call before discovery.
void register_stage0_plugin();

}  // namespace zhost::engine
