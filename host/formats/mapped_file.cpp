// host/formats/mapped_file.cpp: the read-only file map (see mapped_file.hpp).
#include "host/formats/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "host/core/error.hpp"

namespace zhost::formats {

MappedFile::MappedFile(const std::string& path, const char* what, const char* setting) : path_(path) {
  // O_NONBLOCK: opening a FIFO for reading would wait for a writer; the type is checked right after.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) fail_usage("{} '{}' does not exist; check the {}", what, path, setting);
    fail_usage("cannot open {} '{}': {}", what, path, std::strerror(errno));
  }
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    ::close(fd);
    fail_usage("cannot stat {} '{}': {}", what, path, std::strerror(error));
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    fail_usage(
        "{} '{}' is not a regular file (a FIFO, socket or device); zhost memory-maps its data: point the {} "
        "at a regular file",
        what, path, setting);
  }
  size_ = static_cast<size_t>(info.st_size);
  if (size_ > 0) {
    void* address = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    const int error = errno;
    ::close(fd);
    if (address == MAP_FAILED) fail_usage("cannot memory-map {} '{}': {}", what, path, std::strerror(error));
    data_ = static_cast<const unsigned char*>(address);
  } else {
    ::close(fd);
  }
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<unsigned char*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

void MappedFile::advise_random() const {
  if (data_ != nullptr) ::madvise(const_cast<unsigned char*>(data_), size_, MADV_RANDOM);
}

void MappedFile::release(size_t offset, size_t bytes) const {
  if (data_ == nullptr || offset >= size_) return;
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  // Only whole pages inside the range: a neighbour's partly used page stays.
  const size_t first = (offset + page - 1) / page * page;
  const size_t last = std::min(offset + bytes, size_) / page * page;
  if (last > first) ::madvise(const_cast<unsigned char*>(data_) + first, last - first, MADV_DONTNEED);
}

}  // namespace zhost::formats
