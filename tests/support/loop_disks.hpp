// tests/support/loop_disks.hpp: small real file systems for tests of full and failing disks: an ext4 image
// on a loop device (SmallDisk), and one whose backing file lies on a tiny tmpfs (ThinDisk). Both need root,
// mkfs.ext4 and a loop device; mounted() says whether they could be made, and a test skips otherwise.
#pragma once

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

}  // namespace zhost::testing
