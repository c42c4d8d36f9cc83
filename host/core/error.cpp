// host/core/error.cpp: out-of-line parts of the error idiom.
#include "host/core/error.hpp"

namespace zhost::detail {

void assert_failed(const char* expr, const char* file, int line) {
  throw Error(fmt::format("internal error (a zhost bug, please report it): {} failed at {}:{}", expr, file, line));
}

}  // namespace zhost::detail
