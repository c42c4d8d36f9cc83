/* tests/training/cuda_probe_recorder.c: an LD_PRELOAD library for LauncherNeverCallsCuda (supervision_test.cpp).
 * It stands in for the CUDA runtime's cudaGetDeviceCount: appends "<pid>\n" to the file named by
 * ZHOST_TEST_CUDA_PROBES and answers "no device" (cudaErrorNoDevice, 100), so the job trains on the CPU and the
 * test learns which processes asked (Note [No CUDA before fork], host/engine/device.hpp). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((visibility("default"))) int cudaGetDeviceCount(int* count) {
  const char* path = getenv("ZHOST_TEST_CUDA_PROBES");
  if (path != NULL && *path != '\0') {
    char line[32];
    const int length = snprintf(line, sizeof line, "%d\n", (int)getpid());
    const int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd >= 0) {
      ssize_t written = write(fd, line, (size_t)length);
      (void)written;
      close(fd);
    }
  }
  if (count != NULL) *count = 0;
  return 100; /* cudaErrorNoDevice */
}
