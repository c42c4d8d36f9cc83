// host/core/fast_exit.hpp: ending a `zhost run` process without running static destructors.
//
// Note [Fast exit]: at exit, LibTorch's static destructors deregister every operator from its dispatcher
// and the ~290 shared objects it pulls in run their finalisers: about 0.3 s of CPU per process, more in a
// rank forked from the launcher (Note [Forked ranks]), where each page those destructors write is first
// copied. None of it matters to a process that is ending. A `zhost run` process (launcher or rank) has
// closed what it wrote (run directory files, traces, checkpoints: their owners are scoped to the job)
// once the command returns; fast_exit() then flushes the logger and the C and C++ streams and calls
// _exit(). Other commands return from main() as usual.
#pragma once

namespace zhost {

[[noreturn]] void fast_exit(int exit_code);

}  // namespace zhost
