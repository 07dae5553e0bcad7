// Profile and regeneration jobs off the I/O threads, one at a time
// (measurements running side by side would disturb each other), kept in the
// cost database so that a restart keeps their history and resumes the
// unfinished. Every change of a job is an event in the EventLog.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "base/status.h"
#include "costdb/costdb.h"
#include "costdb/store.h"
#include "daemon/events.h"
#include "proto/edgecost.pb.h"
#include "service/train_job.h"

namespace edgecost::daemon {

// What a profile job may ask for, checked when it is started and again when a
// stored one is loaded: a zoo model or an ONNX model stored in the database at
// `store`, by name (never a file), at most one thread per core.
Status CheckProfileRequest(const v1::StartProfileRequest& request, costdb::Store& store);
// A train job: such a model by name, a bounded number of steps, at most one thread per core,
// and its data sets (if any) inside `data_dirs` (ResolveTrainData).
Status CheckTrainRequest(const v1::StartTrainRequest& request, costdb::Store& store,
                         const std::vector<std::string>& data_dirs);

// A train job's data set on this machine: `path` (relative: from the first of `data_dirs`) with its
// symlinks and `..` resolved, which must lie inside one of `data_dirs` (resolved alike).
// PermissionDenied naming the allowed directories, or the [train] data_dirs key when there are none.
Result<std::string> ResolveTrainData(const std::string& path, const std::vector<std::string>& data_dirs);

// Where a train job with keep_model writes its trained model: <the database's folder>/trained/.
std::string TrainedModelDir(const std::string& db_path);

// Finished jobs kept in memory by default; older ones are read from the database when asked for.
inline constexpr size_t kDefaultFinishedJobsInMemory = 256;

class JobManager {
 public:
  // `probes_config`: the TOML file whose [probes] section profiles measure with, or empty.
  // Queued and running jobs stay in memory, and the newest `finished_in_memory` finished ones.
  // `train_data_dirs`: where train jobs may read data sets from (DaemonConfig::train_data_dirs).
  // `edgecost_binary`: DaemonConfig::edgecost_binary.
  JobManager(costdb::Store& store, std::string probes_config, EventLog& events,
             size_t finished_in_memory = kDefaultFinishedJobsInMemory, std::vector<std::string> train_data_dirs = {},
             std::string edgecost_binary = {});
  ~JobManager();  // stops the running job at a safe point and joins

  // Loads the jobs of earlier runs and queues again those that a crash or a
  // stop interrupted (a profile resumes where its stored measurements end),
  // then starts the worker. No job is taken before this.
  Status Open();

  Result<v1::Job> StartProfile(const v1::StartProfileRequest& request);
  // Real training steps under a schedule (kind "train"); the result is the job's train_run.
  Result<v1::Job> StartTrain(const v1::StartTrainRequest& request);
  // After a hardware change: a job that solves every stored schedule request
  // again against the current costs (queued after any re-profiles).
  Result<v1::Job> StartRegeneration(const std::string& why);
  // A job in memory, or a finished one from the database.
  Result<v1::Job> Get(uint64_t id);
  Result<v1::Job> Cancel(uint64_t id);
  // The newest `limit` jobs, oldest first: from memory, and from the database beyond it.
  Result<std::vector<v1::Job>> List(size_t limit);
  // Every job by state name ("STATE_SUCCEEDED"), those only in the database included.
  std::map<std::string, int64_t> CountByState();

  // Stops taking work and stops the running job; used at shutdown.
  void Shutdown();

 private:
  struct Entry {
    v1::Job job;
    v1::StartProfileRequest request;  // kind "profile"
    std::atomic<bool> stop{false};
    bool cancelled =
        false;  // by CancelJob; otherwise a stop is the daemon's shutdown, and the job resumes at the next start
    bool stored = false;  // its last change is in the database, so it may leave memory once finished
  };
  void Worker();
  std::optional<v1::Event> ResumeOrRefuseLocked(Entry& entry);
  Result<v1::Job> Enqueue(std::unique_ptr<Entry> entry, const std::string& kind, const std::string& message);
  void RunProfile(Entry& entry);
  void RunTrain(Entry& entry);
  Result<service::TrainJobResult> RunTrainInChild(Entry& entry, const v1::StartTrainRequest& request,
                                                  const service::TrainJobOptions& options,
                                                  const std::function<void(const service::TrainProgress&)>& progress,
                                                  const std::function<void(const std::string&)>& log);
  void RunRegeneration(Entry& entry);
  void Update(Entry& entry, const std::function<void(v1::Job&)>& change);  // stores it and emits
  void StoreLocked(Entry& entry);
  // Drops the oldest finished jobs beyond the bound from memory (never the worker's, nor an unstored one).
  void TrimLocked();
  static void SetStopped(const Entry& entry, v1::Job& job, const std::string& what_was_done);

  costdb::Store& store_;
  const std::string probes_config_;
  const std::string edgecost_binary_;
  EventLog& events_;
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::optional<costdb::CostDb> db_;  // the jobs table; used under mutex_
  const size_t finished_in_memory_;
  const std::vector<std::string> train_data_dirs_;
  std::map<uint64_t, std::unique_ptr<Entry>> jobs_;
  Entry* running_ = nullptr;     // the worker's job, which stays in memory while it holds it
  uint64_t max_dropped_id_ = 0;  // jobs at or below it may be in the database only
  std::map<std::string, int64_t> dropped_by_state_;
  std::deque<uint64_t> queue_;
  uint64_t next_id_ = 1;
  bool shutting_down_ = false;
  std::thread worker_;
};

}  // namespace edgecost::daemon
