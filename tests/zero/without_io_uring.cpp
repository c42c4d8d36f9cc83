// tests/zero/without_io_uring.cpp: `without_io_uring PROGRAM ARGS...` runs PROGRAM under a seccomp filter that
// fails io_uring_setup(2) with EPERM, as Docker's and Podman's default seccomp profiles do, so that a test
// sees what a user in such a container sees (Note [Engine choice], plugins/offload_nvme/offload_nvme.cpp).
// Every other system call is allowed; the filter is inherited by the program's children (the ranks).
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: without_io_uring PROGRAM [ARGS...]\n");
    return 2;
  }
  struct sock_filter filter[] = {
      // Another architecture's system call numbers mean other calls: allow them unfiltered.
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog program = {static_cast<unsigned short>(sizeof(filter) / sizeof(filter[0])), filter};
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &program) != 0) {
    std::fprintf(stderr, "without_io_uring: cannot install the seccomp filter: %s\n", std::strerror(errno));
    return 2;
  }
  execvp(argv[1], argv + 1);
  std::fprintf(stderr, "without_io_uring: cannot run %s: %s\n", argv[1], std::strerror(errno));
  return 127;
}
