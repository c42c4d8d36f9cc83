// tests/plugin_host/boundary_fixture/reaches_into_host.cpp: a plugin source that breaks Note [Plugins see
// the SDK only] on purpose; the PluginBoundary test checks that the build's check refuses it. Never built.
#include "host/core/error.hpp"
#include "zhost/cpp/plugin.hpp"
