// tests/support/loop_disks.hpp: small real file systems for tests of full and failing disks: an ext4 image
// on a loop device (SmallDisk), one whose backing file lies on a tiny tmpfs (ThinDisk), and one whose device
// shrinks under it so that the blocks past the cut fail with EIO (FailingDisk). All need root, mkfs.ext4 and a
// loop device; mounted() says whether they could be made, and a test skips otherwise.
#pragma once

#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace zhost::testing {

namespace fs = std::filesystem;

// An ext4 file system of `megabytes` on a loop device, mounted at DIR/mnt for the test's life.
class SmallDisk {
 public:
  SmallDisk(const fs::path& dir, int megabytes) : image_(dir / "disk.img"), mount_(dir / "mnt") {
    fs::create_directories(mount_);
    const std::string make = "truncate -s " + std::to_string(megabytes) + "M " + image_.string() +
                             " && mkfs.ext4 -q -F " + image_.string() + " >/dev/null 2>&1 && mount -o loop " +
                             image_.string() + " " + mount_.string() + " 2>&1";
    mounted_ = std::system(make.c_str()) == 0;
  }
  ~SmallDisk() {
    if (mounted_) std::system(("umount " + mount_.string()).c_str());
  }
  bool mounted() const { return mounted_; }
  const fs::path& path() const { return mount_; }

 private:
  fs::path image_, mount_;
  bool mounted_ = false;
};

// A thinly provisioned disk: an ext4 file system of `megabytes` (no journal) on a loop device whose backing
// file lies on a tmpfs of only `backing_megabytes`. The file system thinks it has room (fallocate succeeds),
// but once the tmpfs is full the loop device fails the writes that reach it: a real write error returned
// by the kernel in the middle of a transfer, as a thin volume or a failing disk gives.
class ThinDisk {
 public:
  ThinDisk(const fs::path& dir, int megabytes, int backing_megabytes) : backing_(dir / "backing"), mount_(dir / "mnt") {
    fs::create_directories(backing_);
    fs::create_directories(mount_);
    const std::string image = (backing_ / "disk.img").string();
    if (std::system(("mount -t tmpfs -o size=" + std::to_string(backing_megabytes) + "M tmpfs " + backing_.string() +
                     " 2>/dev/null")
                        .c_str()) != 0)
      return;
    backing_mounted_ = true;
    const std::string make = "truncate -s " + std::to_string(megabytes) + "M " + image +
                             " && mkfs.ext4 -q -F -O ^has_journal -E lazy_itable_init=1,nodiscard " + image +
                             " >/dev/null 2>&1 && mount -o loop " + image + " " + mount_.string() + " 2>&1";
    mounted_ = std::system(make.c_str()) == 0;
  }
  ~ThinDisk() {
    if (mounted_) std::system(("umount " + mount_.string()).c_str());
    if (backing_mounted_) std::system(("umount " + backing_.string()).c_str());
  }
  bool mounted() const { return mounted_; }
  const fs::path& path() const { return mount_; }

 private:
  fs::path backing_, mount_;
  bool backing_mounted_ = false, mounted_ = false;
};

// A disk whose sectors go bad: an ext4 file system of `megabytes` (no journal, 1 KiB blocks, its metadata at
// the start) on a loop device. fail_beyond(m) shrinks the device to its first m megabytes while the file system
// stays mounted: every read or write of a block past them then fails in the block layer ("attempt to access
// beyond end of device") and reaches the caller as EIO, while the blocks before the cut keep working. The file
// system still believes in all its space, so free-space checks and fallocate succeed.
class FailingDisk {
 public:
  FailingDisk(const fs::path& dir, int megabytes) : image_(dir / "disk.img"), mount_(dir / "mnt") {
    fs::create_directories(mount_);
    const std::string make = "truncate -s " + std::to_string(megabytes) + "M " + image_.string() +
                             " && mkfs.ext4 -q -F -b 1024 -O ^has_journal -E lazy_itable_init=1,nodiscard " +
                             image_.string() + " >/dev/null 2>&1";
    if (std::system(make.c_str()) != 0) return;
    if (FILE* out = ::popen(("losetup -f --show " + image_.string() + " 2>/dev/null").c_str(), "r")) {
      char line[256] = {};
      if (std::fgets(line, sizeof(line), out)) device_ = line;
      while (!device_.empty() && std::isspace(static_cast<unsigned char>(device_.back()))) device_.pop_back();
      ::pclose(out);
    }
    if (device_.empty()) return;
    mounted_ = std::system(("mount " + device_ + " " + mount_.string() + " 2>/dev/null").c_str()) == 0;
  }
  ~FailingDisk() {
    if (mounted_) std::system(("umount " + mount_.string() + " 2>/dev/null").c_str());
    if (!device_.empty()) std::system(("losetup -d " + device_ + " 2>/dev/null").c_str());
  }
  FailingDisk(const FailingDisk&) = delete;
  FailingDisk& operator=(const FailingDisk&) = delete;
  bool mounted() const { return mounted_; }
  const fs::path& path() const { return mount_; }
  // Blocks from `megabytes` on fail from now on; false when the device could not be shrunk.
  bool fail_beyond(int megabytes) const {
    return std::system(
               ("truncate -s " + std::to_string(megabytes) + "M " + image_.string() + " && losetup -c " + device_)
                   .c_str()) == 0;
  }

 private:
  fs::path image_, mount_;
  std::string device_;
  bool mounted_ = false;
};

}  // namespace zhost::testing
