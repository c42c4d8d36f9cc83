// host/core/fast_exit.cpp: flush, then _exit (Note [Fast exit] in the header).
#include "host/core/fast_exit.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <iostream>

namespace zhost {

void fast_exit(int exit_code) {
  spdlog::apply_all([](const std::shared_ptr<spdlog::logger>& logger) { logger->flush(); });
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  ::_exit(exit_code);
}

}  // namespace zhost
