// host/formats/mapped_file.hpp: a read-only POSIX memory map of a whole regular file, shared by the data
// sources (host/data) and the safetensors reader. Pages are read from the file only when touched, so a
// reader that copies a byte range holds (in RSS) only the pages of that range.
#pragma once

#include <cstddef>
#include <string>

namespace zhost::formats {

class MappedFile {
 public:
  // `what` names the file in messages ("token file", "safetensors file"), `setting` what the user fixes
  // ("data path", "model path"). A missing file, one that is not a regular file, or a failed map give a
  // one-line UsageError. An empty file maps to data() == nullptr.
  MappedFile(const std::string& path, const char* what, const char* setting);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  MappedFile& operator=(MappedFile&&) = delete;

  const std::string& path() const { return path_; }
  const unsigned char* data() const { return data_; }
  size_t size() const { return size_; }
  // Hints the kernel how the map will be read (MADV_RANDOM for scattered windows).
  void advise_random() const;
  // Drops the pages of [offset, offset + bytes) from this process's resident set (they stay readable:
  // touched again, they are read back from the page cache or the file).
  void release(size_t offset, size_t bytes) const;

 private:
  std::string path_;
  const unsigned char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace zhost::formats
