// host/comm/rendezvous.cpp: how the ranks meet and their groups come to be: the checks of a Rendezvous, the
// choice of backends, the rendezvous store (a c10d TCPStore hosted by rank 0) and the join, the node layout,
// the address Gloo listens on, the world group and sub-groups with their backends connected, the job's
// key-value store, and leaving the store at exit. The collectives on these groups: collectives.cpp.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <thread>

#include "host/comm/comm_internal.hpp"
#include "host/comm/store_listener.hpp"

namespace zhost::comm {

using detail::cuda_usable;
using detail::fail_rank;
using detail::Job;
using detail::join_ints;
using detail::seconds_since;
using detail::to_ms;

namespace {

bool is_loopback(const std::string& address) {
  return address == "localhost" || address.rfind("127.", 0) == 0 || address == "::1";
}

// The local IPv4 address the kernel routes to `master_addr` from (a UDP socket connected to it sends nothing),
// or "" when there is no route or the name does not resolve.
std::string local_address_towards(const std::string& master_addr) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(master_addr.c_str(), "9", &hints, &found) != 0 || !found) return "";
  std::string address;
  const int fd = socket(AF_INET, SOCK_DGRAM, 0);
  if (fd >= 0 && connect(fd, found->ai_addr, found->ai_addrlen) == 0) {
    sockaddr_in local{};
    socklen_t length = sizeof local;
    char text[INET_ADDRSTRLEN] = {};
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0 &&
        inet_ntop(AF_INET, &local.sin_addr, text, sizeof text))
      address = text;
  }
  if (fd >= 0) close(fd);
  freeaddrinfo(found);
  return address;
}

// Where Gloo listens: comm.gloo_interface / GLOO_SOCKET_IFNAME when given; loopback for a loopback master;
// else the address this host reaches the master from (so that nodes whose host name resolves to a loopback
// address, Debian's 127.0.1.1, or to another network still connect); else Gloo's default.
std::shared_ptr<::gloo::transport::Device> choose_gloo_device(const CommOptions& options,
                                                              const std::string& master_addr) {
  std::string interface = options.gloo_interface;
  if (interface.empty()) {
    const char* from_env = std::getenv("GLOO_SOCKET_IFNAME");
    interface = from_env ? std::string(from_env).substr(0, std::string(from_env).find(',')) : "";
  }
  if (!interface.empty()) return compat::gloo_device_for_interface(interface);
  if (is_loopback(master_addr)) return compat::gloo_device_for_hostname("127.0.0.1");
  const std::string towards_master = local_address_towards(master_addr);
  if (!towards_master.empty()) return compat::gloo_device_for_hostname(towards_master);
  return compat::gloo_default_device();
}

}  // namespace

Backend parse_backend(const std::string& name) {
  if (name == "auto") return Backend::kAuto;
  if (name == "gloo") return Backend::kGloo;
  if (name == "nccl") return Backend::kNccl;
  fail_usage("unknown comm.backend '{}': use auto, gloo or nccl{}", name,
             text::did_you_mean(name, {"auto", "gloo", "nccl"}));
}

const char* to_string(Backend backend) {
  switch (backend) {
    case Backend::kAuto:
      return "auto";
    case Backend::kGloo:
      return "gloo";
    case Backend::kNccl:
      return "nccl";
  }
  return "?";
}

// ---- leaving -----------------------------------------------------------------------------------------

namespace {

constexpr std::chrono::milliseconds kLingerAtExit{10000};
constexpr std::chrono::milliseconds kLingerAfterFailure{1500};

}  // namespace

detail::Job::~Job() { say_goodbye(); }

// Rank 0 hosts the store: it waits (bounded) for the others to finish with it before taking it down, so
// that their last store operations, and after a failure their report of who did not arrive, still work.
// The others say goodbye on the tracker's connection (replies bounded), unless the store stopped answering.
void detail::Job::say_goodbye() {
  if (!tracker) return;
  const compat::StorePtr last_words = tracker->store();
  const bool store_answers = tracker->store_error().empty();
  tracker.reset();
  if (global_size == 1 || !joined || !store_answers) return;
  try {
    last_words->add("zhost/exit", 1);
    if (global_rank != 0) return;
    const auto linger = failed ? kLingerAfterFailure : std::min(timeout, kLingerAtExit);
    const auto deadline = Clock::now() + linger;
    while (last_words->add("zhost/exit", 0) < global_size && Clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  } catch (const std::exception& e) {
    spdlog::debug("comm: leaving the rendezvous store: {}", compat::describe_exception(e));
  }
}

// After a failure the backends are left behind, not destroyed: destroying one waits for every collective
// still queued in it, and with a stopped peer each of those runs into comm.timeout_s in turn. The process
// is on its way out; leaving now lets the launcher see the failure at once.
Comm::Group::~Group() {
  if (!job || !job->failed) return;
  for (compat::BackendPtr* backend : {&gloo, &nccl}) {
    if (*backend) static_cast<void>(backend->release());  // deliberately leaked
  }
}

// ---- creation ----------------------------------------------------------------------------------------

namespace {

std::shared_ptr<Comm::Group> make_group(const std::shared_ptr<Job>& job, const std::string& name,
                                        std::vector<int> global_ranks, int rank) {
  auto group = std::make_shared<Comm::Group>();
  group->job = job;
  group->name = name;
  group->size = static_cast<int>(global_ranks.size());
  group->global_ranks = std::move(global_ranks);
  group->rank = rank;
  for (int member : group->global_ranks)
    group->remote.push_back(job->node_of_rank[member] != job->node_of_rank[job->global_rank]);
  const std::string prefix = fmt::format("zhost/g/{}/", name);
  group->store = compat::make_prefix_store(prefix, job->store);
  group->progress = std::make_shared<detail::GroupProgress>(prefix, rank);
  const auto started = Clock::now();
  try {
    if (job->use_gloo) {
      group->gloo = compat::make_gloo(compat::make_prefix_store("gloo/", group->store), rank, group->size, job->timeout,
                                      job->gloo_device);
    }
#ifdef ZHOST_WITH_CUDA
    if (job->use_nccl) {
      group->nccl =
          compat::make_nccl(compat::make_prefix_store("nccl/", group->store), rank, group->size, job->timeout);
    }
#endif
  } catch (const std::exception& e) {
    fail_rank(
        fmt::format("could not connect the ranks of group {} ({}), gave up after {:.1f} s "
                    "(comm.timeout_s = {:g}): {}",
                    name, join_ints(group->global_ranks), seconds_since(started), job->options.timeout_s,
                    compat::describe_exception(e)));
  }
  job->tracker->add(group->progress);
  std::lock_guard<std::mutex> lock(job->mutex);
  job->groups.push_back(group);
  return group;
}

void choose_backends(Job& job) {
  switch (job.options.backend) {
    case Backend::kAuto:
      job.use_nccl = cuda_usable() && !job.options.cuda_over_gloo;  // NCCL refuses two ranks on one GPU
      break;
    case Backend::kGloo:
      break;
    case Backend::kNccl:
#ifndef ZHOST_WITH_CUDA
      fail_usage(
          "comm.backend = \"nccl\" needs CUDA, but this zhost was built against a LibTorch without CUDA; "
          "use \"gloo\" or \"auto\"");
#endif
      if (!cuda_usable()) {
        fail_usage(
            "comm.backend = \"nccl\" needs a CUDA device, but none is visible (check CUDA_VISIBLE_DEVICES); "
            "use \"gloo\" or \"auto\"");
      }
      if (job.options.cuda_over_gloo)
        fail_usage(
            "debug.share_cuda_device puts several ranks on one GPU, which NCCL refuses: use comm.backend = "
            "\"gloo\" or \"auto\"");
      job.use_gloo = false;
      job.use_nccl = true;
      break;
  }
  if (job.options.one_rank_groups_use_nccl && !job.use_nccl)
    fail_usage(
        "debug.nccl_single_rank needs NCCL: a CUDA build, a visible GPU and comm.backend = \"auto\" or "
        "\"nccl\"");
}

void validate(const Rendezvous& rendezvous, const CommOptions& options) {
  if (rendezvous.world_size < 1) fail_usage("world size must be at least 1, got {}", rendezvous.world_size);
  if (rendezvous.rank < 0 || rendezvous.rank >= rendezvous.world_size) {
    fail_usage("rank {} is outside the world of {} ranks", rendezvous.rank, rendezvous.world_size);
  }
  if (rendezvous.world_size > 1 && (rendezvous.master_port < 1 || rendezvous.master_port > 65535)) {
    fail_usage("master port {} is not a valid TCP port (1-65535)", rendezvous.master_port);
  }
  if (rendezvous.timeout_s <= 0) fail_usage("the rendezvous timeout must be positive, got {} s", rendezvous.timeout_s);
  if (options.timeout_s <= 0) fail_usage("comm.timeout_s must be positive, got {}", options.timeout_s);
}

// Note [Node layout]: each rank publishes what it knows of its node under zhost/node/<rank> when it joins:
// "<local world size>\n<launcher>\n<the variable it came from>\n<node>". After the join every rank reads all of them,
// numbers the nodes in the order of their smallest rank, and checks each rank's local world size against the ranks that
// share its node string. Every rank reads the same values, so every rank reaches the same verdict: a wrong
// LOCAL_WORLD_SIZE stops all of them with the same message instead of leaving some waiting for the others.
std::string node_key(int rank) { return fmt::format("zhost/node/{}", rank); }

std::vector<uint8_t> encode_node(const Rendezvous& rendezvous) {
  const std::string text = fmt::format("{}\n{}\n{}\n{}", rendezvous.local_world_size, rendezvous.launcher,
                                       rendezvous.local_world_size_from, rendezvous.node);
  return std::vector<uint8_t>(text.begin(), text.end());
}

struct NodeOfRank {
  int local_world_size = 0;
  std::string launcher;
  std::string variable;  // where the launcher's local world size came from
  std::string node;
};

NodeOfRank decode_node(const std::vector<uint8_t>& value, int rank) {
  const std::string text(value.begin(), value.end());
  const size_t first = text.find('\n');
  const size_t second = first == std::string::npos ? first : text.find('\n', first + 1);
  const size_t third = second == std::string::npos ? second : text.find('\n', second + 1);
  NodeOfRank decoded;
  try {
    if (third == std::string::npos) throw std::invalid_argument("no separator");
    decoded.local_world_size = std::stoi(text.substr(0, first));
  } catch (const std::exception&) {
    fail_rank(
        fmt::format("rendezvous: rank {} published a malformed node record '{}' (another zhost version?)", rank, text));
  }
  decoded.launcher = text.substr(first + 1, second - first - 1);
  decoded.variable = text.substr(second + 1, third - second - 1);
  decoded.node = text.substr(third + 1);
  return decoded;
}

void exchange_nodes(Job& job, const Rendezvous& rendezvous) {
  std::vector<NodeOfRank> ranks;
  std::vector<std::string> keys;
  for (int rank = 0; rank < rendezvous.world_size; ++rank) keys.push_back(node_key(rank));
  try {
    job.store->wait(keys, to_ms(rendezvous.timeout_s));  // present already (Note [Node layout]): bounded anyway
    for (int rank = 0; rank < rendezvous.world_size; ++rank)
      ranks.push_back(decode_node(job.store->get(keys[rank]), rank));
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    fail_rank(fmt::format("rendezvous at {}: rank {} could not read the ranks' nodes within {:.1f} s: {}",
                          job.store_address, rendezvous.rank, rendezvous.timeout_s, compat::describe_exception(e)));
  }
  std::map<std::string, int> number;
  std::vector<std::vector<int>> members;
  for (int rank = 0; rank < rendezvous.world_size; ++rank) {
    const auto [it, added] = number.emplace(ranks[rank].node, static_cast<int>(members.size()));
    if (added) members.emplace_back();
    members[it->second].push_back(rank);
    job.node_of_rank.push_back(it->second);
  }
  job.num_nodes = static_cast<int>(members.size());
  for (int rank = 0; rank < rendezvous.world_size; ++rank) {
    const NodeOfRank& told = ranks[rank];
    const std::vector<int>& same_node = members[job.node_of_rank[rank]];
    if (told.local_world_size <= 0 || told.local_world_size == static_cast<int>(same_node.size())) continue;
    fail_usage(
        "the ranks do not agree on the nodes: {} told rank {} that {} rank{} run on its node ({}), but {} rank{} "
        "({}) name its node '{}'; give the ranks of a node the same node identity (--node-rank, GROUP_RANK, "
        "SLURM_NODEID, else the host name) and their number as {}",
        told.launcher, rank, told.local_world_size, told.local_world_size == 1 ? "" : "s", told.variable,
        same_node.size(), same_node.size() == 1 ? "" : "s", join_ints(same_node), told.node, told.variable);
  }
}

// Every rank registers under its rank; waiting for all of them names the ranks that never came.
void join(Job& job, const Rendezvous& rendezvous) {
  const auto join_key = [](int rank) { return fmt::format("zhost/join/{}", rank); };
  int64_t joined_as = 0;
  try {
    // Before the join key, on the same connection: once a rank has joined, its node is in the store.
    job.store->set(node_key(rendezvous.rank), encode_node(rendezvous));
    joined_as = job.store->add(join_key(rendezvous.rank), 1);
  } catch (const std::exception& e) {
    fail_rank(
        fmt::format("rendezvous at {}: the store did not answer rank {}'s join ({}); rank 0 hosts it: is it "
                    "stopped or gone?",
                    job.store_address, rendezvous.rank, compat::describe_exception(e)));
  }
  if (joined_as > 1) {
    fail_usage("two processes joined the rendezvous at {} as rank {}: check RANK in each process's environment",
               job.store_address, rendezvous.rank);
  }
  std::vector<std::string> keys;
  for (int rank = 0; rank < rendezvous.world_size; ++rank) keys.push_back(join_key(rank));
  try {
    job.store->wait(keys, to_ms(rendezvous.timeout_s));
  } catch (const std::exception& e) {
    std::vector<int> missing;
    try {
      for (int rank = 0; rank < rendezvous.world_size; ++rank) {
        if (!job.store->check({keys[rank]})) missing.push_back(rank);
      }
    } catch (const std::exception&) {
      fail_rank(fmt::format("rendezvous at {} failed: {}", job.store_address, compat::describe_exception(e)));
    }
    fail_rank(fmt::format("rendezvous at {} timed out after {:.1f} s: {} of {} ranks joined; missing: rank{} {}",
                          job.store_address, rendezvous.timeout_s, rendezvous.world_size - missing.size(),
                          rendezvous.world_size, missing.size() == 1 ? "" : "s", join_ints(missing)));
  }
}

compat::StorePtr connect_store(const Rendezvous& rendezvous, bool host_it) {
  // The client's own retries would wait the whole timeout again after this one (store_listener.hpp).
  if (!host_it &&
      !detail::wait_until_listening(rendezvous.master_addr, rendezvous.master_port,
                                    Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                       std::chrono::duration<double>(rendezvous.timeout_s)))) {
    throw std::runtime_error(
        "nothing accepted a connection there; rank 0 hosts the store: check that it started and that MASTER_ADDR "
        "and MASTER_PORT name its host and port");
  }
  return compat::make_tcp_store(rendezvous.master_addr, rendezvous.master_port, host_it, rendezvous.world_size,
                                to_ms(rendezvous.timeout_s));
}

}  // namespace

std::unique_ptr<Comm> Comm::create(const Rendezvous& rendezvous, const CommOptions& options) {
  validate(rendezvous, options);
  auto job = std::make_shared<Job>();
  job->global_rank = rendezvous.rank;
  job->global_size = rendezvous.world_size;
  job->options = options;
  job->timeout = to_ms(options.timeout_s);
  job->store_address = fmt::format("{}:{}", rendezvous.master_addr, rendezvous.master_port);
  choose_backends(*job);

  compat::StorePtr publish_store, ask_store;
  const auto started = Clock::now();
  if (rendezvous.world_size == 1) {
    job->store = c10::make_intrusive<c10d::HashStore>();
    publish_store = ask_store = job->store;
  } else {
    try {
      job->store = connect_store(rendezvous, rendezvous.rank == 0);
      // Every reply, from the first (join's), within the rendezvous timeout: rank 0 may be stopped.
      compat::bound_replies(job->store, to_ms(rendezvous.timeout_s));
      publish_store = connect_store(rendezvous, false);  // the tracker's own: never queued behind a wait
      ask_store = connect_store(rendezvous, false);
    } catch (const std::exception& e) {
      fail_rank(
          fmt::format("rendezvous: rank {} could not {} the store at {}, gave up after {:.1f} s "
                      "(comm.timeout_s = {:g}): {}",
                      rendezvous.rank, rendezvous.rank == 0 ? "host" : "reach", job->store_address,
                      seconds_since(started), rendezvous.timeout_s, compat::describe_exception(e)));
    }
  }
  join(*job, rendezvous);
  job->joined = true;
  job->tracker = std::make_unique<detail::ProgressTracker>(publish_store, ask_store, rendezvous.rank);
  exchange_nodes(*job, rendezvous);  // after the tracker: rank 0 keeps the store up until all have read
  if (job->use_gloo) job->gloo_device = choose_gloo_device(options, rendezvous.master_addr);

  std::vector<int> everyone(rendezvous.world_size);
  std::iota(everyone.begin(), everyone.end(), 0);
  auto group = make_group(job, "world", std::move(everyone), rendezvous.rank);
  spdlog::debug("comm: rank {} of {} joined at {} (node {} of {}; gloo: {}, nccl: {}, timeout {} s)", rendezvous.rank,
                rendezvous.world_size, job->store_address, job->node_of_rank[rendezvous.rank], job->num_nodes,
                job->use_gloo, job->use_nccl, options.timeout_s);
  return std::unique_ptr<Comm>(new Comm(std::move(group)));
}

Comm::Comm(std::shared_ptr<Group> group) : group_(std::move(group)) {}
Comm::~Comm() = default;

int Comm::rank() const { return group_->rank; }
int Comm::world_size() const { return group_->size; }
const std::vector<int>& Comm::global_ranks() const { return group_->global_ranks; }
const std::string& Comm::name() const { return group_->name; }
const std::vector<int>& Comm::node_of_rank() const { return group_->job->node_of_rank; }
int Comm::num_nodes() const { return group_->job->num_nodes; }
const RemotePeers& Comm::remote_peers() const { return group_->remote; }

std::unique_ptr<Comm> Comm::new_group(const std::vector<int>& ranks) {
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  if (ranks.empty()) fail("new_group: the rank list is empty");
  if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    fail("new_group: rank list [{}] has duplicates", join_ints(ranks));
  }
  if (sorted.front() < 0 || sorted.back() >= group_->size) {
    fail("new_group: rank list [{}] has ranks outside group {} of {} ranks", join_ints(ranks), group_->name,
         group_->size);
  }
  const auto me = std::find(ranks.begin(), ranks.end(), group_->rank);
  if (me == ranks.end()) {
    fail("new_group: rank {} is not in [{}]; only members create a group", group_->rank, join_ints(ranks));
  }
  std::vector<int> members;
  for (int rank : ranks) members.push_back(group_->global_ranks[rank]);
  std::string name = fmt::format("{}/{}", group_->name, join_ints(members, "-"));
  {
    std::lock_guard<std::mutex> lock(group_->job->mutex);
    const int earlier = group_->job->group_names[name]++;
    if (earlier > 0) name += fmt::format("#{}", earlier);
  }
  std::lock_guard<std::mutex> issue_lock(group_->issue_mutex);
  return std::unique_ptr<Comm>(
      new Comm(make_group(group_->job, name, std::move(members), static_cast<int>(me - ranks.begin()))));
}

void Comm::store_set(const std::string& key, const std::vector<uint8_t>& value) {
  try {
    group_->job->store->set("zhost/kv/" + key, value);
  } catch (const std::exception& e) {
    throw Error(fmt::format("key-value store at {}: set('{}') failed: {}", group_->job->store_address, key,
                            compat::describe_exception(e)),
                ExitCode::kRankFailed);
  }
}

std::optional<std::vector<uint8_t>> Comm::store_get(const std::string& key, double timeout_s) {
  const std::string full = "zhost/kv/" + key;
  auto deadline = std::chrono::steady_clock::now() + to_ms(timeout_s);
  try {
    // Poll rather than wait(): a c10d wait that times out throws, which cannot be told from a dead store.
    while (!group_->job->store->check({full})) {
      if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return group_->job->store->get(full);
  } catch (const std::exception& e) {
    throw Error(fmt::format("key-value store at {}: get('{}') failed: {}", group_->job->store_address, key,
                            compat::describe_exception(e)),
                ExitCode::kRankFailed);
  }
}

}  // namespace zhost::comm
