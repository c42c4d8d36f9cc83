// Compiles every public SDK header, and the C++ helpers, as C++17.
#include "zhost/cpp/collective.hpp"
#include "zhost/cpp/partition.hpp"
#include "zhost/cpp/plugin.hpp"
#include "zhost/zhost.h"
int zhost_header_check_cxx() { return ZHOST_ABI_MAJOR; }
