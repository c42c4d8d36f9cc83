// tests/offload_nvme/fault_test.cpp: the NVMe tier's faults, each with both I/O engines, through the tier's
// ABI with the plugin loaded by the host's own loader: a disk that fills up (an 8 MiB ext4 image mounted
// by the test) is an error naming the bytes needed and the folder, and every buffer stored before still
// loads; a write the device fails mid-transfer (a loop device backed by a full tmpfs) names the file, the
// offset and the reason, and the buffers stored before still load; a device whose sectors fail (EIO) under the
// mounted file system names the file and offset on read and on write, and the buffers it can still reach load
// unchanged; a byte flipped in the tier's file is reported with
// the file and offset and never handed over; a dead job's folder (Note [Job folders]) is removed at start while a live
// one is kept; nothing is left behind when the tier goes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <vector>

#include "host/plugins/instances.hpp"
#include "host/plugins/loader.hpp"
#include "host/plugins/resolver.hpp"
#include "host/services/host_services.hpp"
#include "tests/support/loop_disks.hpp"
#include "tests/support/scratch_dir.hpp"
#include "zhost/zhost.h"

using namespace zhost;
using zhost::testing::FailingDisk;
using zhost::testing::SmallDisk;
using zhost::testing::ThinDisk;
namespace fs = std::filesystem;

namespace {

std::vector<char> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<char> v(n);
  for (auto& c : v) c = static_cast<char>(rng());
  return v;
}

// Folders under `dir` (names only), sorted.
std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

class Tier {
 public:
  Tier(HostServices& host, const std::string& nvme_path, const std::string& engine, int64_t block)
      : host_(host), instances_(host) {
    found_.push_back(PluginLoader(host).load(std::string(ZHOST_PLUGIN_BUILD_DIR) + "/zhost_offload_nvme.so"));
    Resolution resolution = resolve_plugins({{"offload:nvme", "test"}}, found_);
    instances_.create_all(resolution, [&](const LoadedPlugin&) {
      return std::map<std::string, ConfigValue>{{"zero.offload_optimizer.nvme_path", nvme_path},
                                                {"zero.offload_optimizer.pin_memory", false},
                                                {"aio.block_size", block},
                                                {"aio.queue_depth", int64_t{4}},
                                                {"aio.intra_op_parallelism", int64_t{2}},
                                                {"aio.thread_count", int64_t{0}},
                                                {"aio.single_submit", false},
                                                {"aio.overlap_events", true},
                                                {"offload_nvme.io_engine", engine},
                                                {"offload_nvme.verify_checksums", true}};
    });
    const PluginInstance* live = instances_.of_kind(ZHOST_KIND_OFFLOAD);
    instance_ = live->instance;
    api_ = live->plugin->api->storage;
  }

  // "" on success, else the tier's error message (the call's or its event's).
  std::string store(uint64_t key, std::vector<char>& bytes) { return io(api_->store, key, bytes); }
  std::string load(uint64_t key, std::vector<char>& bytes) { return io(api_->load, key, bytes); }

 private:
  using IoFn = zhost_status* (*)(zhost_plugin_instance*, zhost_tier_io_args*);
  std::string io(IoFn fn, uint64_t key, std::vector<char>& bytes) {
    int64_t shape = static_cast<int64_t>(bytes.size());
    DLTensor t{};
    t.data = bytes.data();
    t.device = DLDevice{kDLCPU, 0};
    t.ndim = 1;
    t.dtype = DLDataType{kDLUInt, 8, 1};
    t.shape = &shape;
    zhost_tier_io_args args{sizeof(args), nullptr, key, &t, nullptr};
    std::string error = message(fn(instance_, &args));
    if (error.empty() && args.event) {
      zhost_tier_event_args wait{sizeof(wait), nullptr, args.event, 0};
      error = message(api_->wait(instance_, &wait));
    }
    return error;
  }

  std::string message(zhost_status* status) {
    if (!status) return "";
    std::string text = host_.table()->status_message(status);
    host_.table()->status_destroy(status);
    return text.empty() ? "(error without a message)" : text;
  }

  HostServices& host_;
  std::vector<LoadedPlugin> found_;
  PluginInstances instances_;
  zhost_plugin_instance* instance_ = nullptr;
  const zhost_storage_api* api_ = nullptr;
};

// Stores 1 MiB buffers of random bytes under keys 0, 1, ... until a store fails or `most` are stored; the
// buffers stored, in key order, and the failing store's error ("" if none failed).
std::vector<std::vector<char>> store_until_error(Tier& tier, uint64_t most, std::string& error) {
  std::vector<std::vector<char>> stored;
  error.clear();
  for (uint64_t key = 0; key < most && error.empty(); ++key) {
    std::vector<char> bytes = random_bytes(1 << 20, static_cast<uint32_t>(key));
    error = tier.store(key, bytes);
    if (error.empty()) stored.push_back(std::move(bytes));
  }
  return stored;
}

// Every buffer of `stored` (keys 0, 1, ...) loads back as it was stored.
void expect_all_load(Tier& tier, const std::vector<std::vector<char>>& stored) {
  for (uint64_t key = 0; key < stored.size(); ++key) {
    std::vector<char> back(1 << 20);
    ASSERT_EQ(tier.load(key, back), "") << "buffer " << key;
    EXPECT_EQ(back, stored[key]) << "buffer " << key;
  }
}

class NvmeFaults : public ::testing::TestWithParam<const char*> {};
INSTANTIATE_TEST_SUITE_P(Engines, NvmeFaults, ::testing::Values("io_uring", "threads"));

TEST_P(NvmeFaults, FullDiskIsAClearErrorAndStoredBuffersSurvive) {
  zhost::testing::ScratchDir dir;
  SmallDisk disk(dir.path(), 8);
  if (!disk.mounted()) GTEST_SKIP() << "no loop mount here (needs root, mkfs.ext4 and a loop device)";
  HostServices host;
  {
    Tier tier(host, disk.path().string(), GetParam(), 65536);
    std::string error;
    const std::vector<std::vector<char>> stored = store_until_error(tier, 16, error);
    ASSERT_FALSE(error.empty()) << "16 MiB fit on an 8 MiB disk";
    EXPECT_GE(stored.size(), 2u);
    EXPECT_NE(error.find("needs 1048576 more bytes"), std::string::npos) << error;
    EXPECT_NE(error.find(disk.path().string() + "/zhost-nvme-"), std::string::npos) << error;
    // Replacing a buffer on the full disk fails too, and the old copy is still there.
    std::vector<char> other = random_bytes(1 << 20, 99);
    EXPECT_NE(tier.store(0, other), "");
    expect_all_load(tier, stored);
  }
  EXPECT_EQ(entries(disk.path()), std::vector<std::string>{"lost+found"}) << "the tier left files behind";
}

// A write that the device fails mid-transfer (after the space was reserved): one line naming the file, the
// offset and the kernel's reason; the buffer is not stored, and every buffer stored before still loads.
TEST_P(NvmeFaults, WriteErrorMidTransferNamesFileAndOffsetAndEarlierBuffersSurvive) {
  zhost::testing::ScratchDir dir;
  ThinDisk disk(dir.path(), 64, 4);
  if (!disk.mounted()) GTEST_SKIP() << "no tmpfs and loop mount here (needs root, mkfs.ext4 and a loop device)";
  HostServices host;
  {
    Tier tier(host, disk.path().string(), GetParam(), 65536);
    std::string error;
    const std::vector<std::vector<char>> stored = store_until_error(tier, 32, error);
    ASSERT_FALSE(error.empty()) << "32 MiB fit on a disk backed by 4 MiB";
    EXPECT_GE(stored.size(), 1u);
    // e.g. "offload_nvme: write of 65536 bytes at offset 2162688 of .../data.bin failed: No space left on
    // device; ... (buffer 3)": the kernel's reason, where, and which buffer.
    EXPECT_NE(error.find("offload_nvme: write of "), std::string::npos) << error;
    EXPECT_NE(error.find(" at offset "), std::string::npos) << error;
    EXPECT_NE(error.find(disk.path().string() + "/zhost-nvme-"), std::string::npos) << error;
    EXPECT_NE(error.find("/data.bin failed: "), std::string::npos) << error;
    EXPECT_NE(error.find("(buffer " + std::to_string(stored.size()) + ")"), std::string::npos) << error;
    expect_all_load(tier, stored);
    std::vector<char> never(1 << 20);
    EXPECT_NE(tier.load(stored.size(), never), "") << "the failed buffer was stored";
  }
}

// The device fails under the mounted file system (FailingDisk: every block past 24 MiB gives EIO) with 20
// buffers on it: each that still loads is exactly what was stored; each that does not names the read, the file,
// the offset and the kernel's reason, and none is handed over. A buffer stored after the failure fails the same
// way on its write, and what loaded before still loads.
TEST_P(NvmeFaults, DeviceIoErrorsNameFileAndOffsetAndNothingReachableIsLost) {
  zhost::testing::ScratchDir dir;
  FailingDisk disk(dir.path(), 64);
  if (!disk.mounted()) GTEST_SKIP() << "no loop mount here (needs root, mkfs.ext4 and a loop device)";
  HostServices host;
  {
    Tier tier(host, disk.path().string(), GetParam(), 65536);
    std::string error;
    const std::vector<std::vector<char>> stored = store_until_error(tier, 20, error);
    ASSERT_EQ(error, "");
    ASSERT_TRUE(disk.fail_beyond(24));
    const std::string file_prefix = disk.path().string() + "/zhost-nvme-";
    std::vector<uint64_t> readable, unreadable;
    for (uint64_t key = 0; key < stored.size(); ++key) {
      std::vector<char> back(1 << 20, 0);
      const std::string failure = tier.load(key, back);
      if (failure.empty()) {
        EXPECT_EQ(back, stored[key]) << "buffer " << key << " loaded other bytes than were stored";
        readable.push_back(key);
        continue;
      }
      unreadable.push_back(key);
      // e.g. "offload_nvme: read of 65536 bytes at offset 17039360 of .../data.bin failed: Input/output error"
      EXPECT_NE(failure.find("offload_nvme: read of "), std::string::npos) << failure;
      EXPECT_NE(failure.find(" at offset "), std::string::npos) << failure;
      EXPECT_NE(failure.find(file_prefix), std::string::npos) << failure;
      EXPECT_NE(failure.find("/data.bin failed: Input/output error"), std::string::npos) << failure;
    }
    EXPECT_FALSE(readable.empty()) << "no buffer lay before the failing blocks";
    ASSERT_FALSE(unreadable.empty()) << "no buffer lay past 24 MiB: the test's disk did not fail";
    std::vector<char> more = random_bytes(1 << 20, 1000);
    const std::string write_failure = tier.store(stored.size(), more);
    EXPECT_NE(write_failure.find("offload_nvme: write of "), std::string::npos) << write_failure;
    EXPECT_NE(write_failure.find(file_prefix), std::string::npos) << write_failure;
    EXPECT_NE(write_failure.find("/data.bin failed: Input/output error"), std::string::npos) << write_failure;
    for (uint64_t key : readable) {
      std::vector<char> back(1 << 20, 0);
      ASSERT_EQ(tier.load(key, back), "") << "buffer " << key;
      EXPECT_EQ(back, stored[key]) << "buffer " << key;
    }
  }
}

TEST_P(NvmeFaults, FlippedByteIsReportedWithFileAndOffset) {
  zhost::testing::ScratchDir dir;
  HostServices host;
  {
    Tier tier(host, dir.path().string(), GetParam(), 4096);
    std::vector<char> bytes = random_bytes(3 * 4096 + 100, 7), back(bytes.size(), 0);
    ASSERT_EQ(tier.store(5, bytes), "");
    ASSERT_EQ(tier.load(5, back), "");
    ASSERT_EQ(back, bytes);
    // Flip one byte of the second block, behind the tier's back.
    const std::vector<std::string> folders = entries(dir.path());
    ASSERT_EQ(folders.size(), 1u);
    const std::string file = (dir.path() / folders[0] / "data.bin").string();
    int fd = ::open(file.c_str(), O_RDWR);
    ASSERT_GE(fd, 0) << file;
    char c = 0;
    ASSERT_EQ(::pread(fd, &c, 1, 4096 + 17), 1);
    c = static_cast<char>(c ^ 0x20);
    ASSERT_EQ(::pwrite(fd, &c, 1, 4096 + 17), 1);
    ::fsync(fd);
    ::close(fd);
    std::string error = tier.load(5, back);
    EXPECT_NE(error.find("checksum mismatch in " + file + " at offset 4096 "), std::string::npos) << error;
  }
  EXPECT_TRUE(entries(dir.path()).empty()) << "the tier left files behind";
}

TEST_P(NvmeFaults, DeadJobsFolderIsRemovedAndLiveOnesKept) {
  zhost::testing::ScratchDir dir;
  // A dead job's folder: its lock file is not locked by anyone. A live one: locked here.
  const fs::path dead = dir.path() / "zhost-nvme-999999-0", live = dir.path() / "zhost-nvme-1-0";
  for (const fs::path& folder : {dead, live}) {
    fs::create_directories(folder);
    std::ofstream(folder / "owner.lock") << "999999\n";
    std::ofstream(folder / "data.bin") << std::string(5000, 'x');
  }
  int lock = ::open((live / "owner.lock").c_str(), O_RDWR);
  ASSERT_EQ(::flock(lock, LOCK_EX), 0);
  HostServices host;
  {
    Tier tier(host, dir.path().string(), GetParam(), 4096);
    EXPECT_FALSE(fs::exists(dead)) << "a dead job's folder stayed";
    EXPECT_TRUE(fs::exists(live / "data.bin")) << "a live job's folder was removed";
    EXPECT_EQ(entries(dir.path()).size(), 2u);  // the live one and the tier's own
  }
  EXPECT_EQ(entries(dir.path()), std::vector<std::string>{"zhost-nvme-1-0"});
  ::close(lock);
}

}  // namespace
