// host/job/control_channel.hpp: commands to a running job through its run directory (`zhost control`).
//
// Note [Control channel]: RUN_DIR/control/ holds
//   job.json          {"pid", "host"} of the job's rank 0 while the job runs (removed when it ends);
//   NNNNNNNN.request  one command, {"command": "swap", "optimizer": "STORAGE"}: a client writes it under a
//                     temporary name and links it to the next free number, so two racing clients get two
//                     numbers and the job serves them one after the other, in number order;
//   NNNNNNNN.ack      the job's answer at the next step boundary: {"after_step": N} (it will act after step N)
//                     or {"error": "..."} (refused: a malformed command, or the job ended first);
//   NNNNNNNN.result   the outcome: {"ok": true, ...} or {"ok": false, "error": "..."}.
// Only rank 0 reads the folder; the step's loss all-reduce tells the other ranks a request is waiting, and
// the command itself travels through the job's store. Answers are written to a temporary name and renamed,
// so a client never reads half a file. Every wait of the client has a deadline.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace zhost::control {

// The job's side (rank 0).
class ControlChannel {
 public:
  // Creates RUN_DIR/control and writes job.json.
  explicit ControlChannel(const std::string& run_dir);
  // Answers every request still waiting with "the job ended", and removes job.json.
  ~ControlChannel();
  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;

  // The number of the oldest request not yet acknowledged, or 0 (one readdir).
  int64_t pending() const;
  // The request's command; a file that is not a JSON object comes back as nullopt (answer it with refuse()).
  std::optional<nlohmann::json> read(int64_t number) const;
  void acknowledge(int64_t number, int64_t after_step) const;
  void refuse(int64_t number, const std::string& error) const;  // writes the ack and the result
  void answer(int64_t number, const nlohmann::json& result) const;

 private:
  std::string dir_;
};

// The client's side: sends `command` to the job in `run_dir`, prints the acknowledgement and the result on
// stdout as they arrive, and returns the result (its "ok" says whether the command succeeded). Throws
// UsageError when there is no running job there, or the job does not answer within `timeout_s` per wait.
nlohmann::json send_command(const std::string& run_dir, const nlohmann::json& command, double timeout_s);

}  // namespace zhost::control
