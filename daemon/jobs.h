// Profile jobs off the I/O threads, one at a time (measurements running side
// by side would disturb each other), and the event log that WatchEvents
// long-polls: job changes and stored schedules, each with a sequence number.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "base/status.h"
#include "proto/edgecost.pb.h"

namespace edgecost::daemon {

class JobManager {
 public:
  explicit JobManager(std::string db_path);
  ~JobManager();  // stops the running job at a safe point and joins

  Result<v1::Job> StartProfile(const v1::StartProfileRequest& request);
  // After a hardware change: a job that solves every stored schedule request
  // again against the current costs (queued after any re-profiles).
  Result<v1::Job> StartRegeneration(const std::string& why);
  Result<v1::Job> Get(uint64_t id);
  Result<v1::Job> Cancel(uint64_t id);
  std::vector<v1::Job> List();

  // Events after `after_sequence`, waiting up to `wait_s` for the first one.
  std::vector<v1::Event> Watch(uint64_t after_sequence, double wait_s);
  void Emit(v1::Event event);  // also for schedules stored by SolverService

  // Stops taking work and stops the running job; used at shutdown.
  void Shutdown();

 private:
  struct Entry {
    v1::Job job;
    v1::StartProfileRequest request;  // kind "profile"
    std::atomic<bool> stop{false};
  };
  void Worker();
  Result<v1::Job> Enqueue(std::unique_ptr<Entry> entry, const std::string& kind, const std::string& message);
  void RunProfile(Entry& entry);
  void RunRegeneration(Entry& entry);
  void Update(Entry& entry, const std::function<void(v1::Job&)>& change);  // and emits

  const std::string db_path_;
  std::mutex mutex_;
  std::condition_variable work_ready_, event_ready_;
  std::map<uint64_t, std::unique_ptr<Entry>> jobs_;
  std::deque<uint64_t> queue_;
  std::vector<v1::Event> events_;
  uint64_t next_id_ = 1;
  bool shutting_down_ = false;
  std::thread worker_;
};

}  // namespace edgecost::daemon
