#include "daemon/jobs.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <thread>
#include <tuple>

#include <spdlog/spdlog.h>

#include "base/files.h"
#include "base/subprocess.h"
#include "base/time_text.h"
#include "base/units.h"
#include "costdb/costdb.h"
#include "daemon/log.h"
#include "graph/resolve.h"
#include "graph/zoo.h"
#include "proto/json.h"
#include "service/cost_tables.h"
#include "service/models.h"
#include "service/profile_job.h"
#include "service/train_job.h"
#include "solver/solve.h"
#include "train/data.h"
#include "train/pager.h"

namespace edgecost::daemon {
namespace {

constexpr uint32_t kMaxCrashes = 2;    // a job that took the daemon down this often is not run again
constexpr size_t kMaxQueuedJobs = 64;  // beyond this, StartProfile is refused rather than queue without end

}  // namespace

JobManager::JobManager(costdb::Store& store, std::string probes_config, EventLog& events, size_t finished_in_memory,
                       std::vector<std::string> train_data_dirs, std::string edgecost_binary)
    : store_(store),
      probes_config_(std::move(probes_config)),
      edgecost_binary_(std::move(edgecost_binary)),
      events_(events),
      finished_in_memory_(finished_in_memory),
      train_data_dirs_(std::move(train_data_dirs)) {}

JobManager::~JobManager() {
  Shutdown();
  if (worker_.joinable()) worker_.join();
}

Status JobManager::Open() {
  EC_ASSIGN_OR_RETURN(costdb::CostDb db, store_.OpenConnection());  // the jobs table's own
  EC_ASSIGN_OR_RETURN(std::vector<costdb::StoredJob> stored, db.ListJobs());
  std::vector<v1::Event> events;
  {
    std::lock_guard lock(mutex_);
    db_.emplace(std::move(db));
    for (costdb::StoredJob& s : stored) {
      auto entry = std::make_unique<Entry>();
      entry->job = std::move(s.job);
      entry->request = std::move(s.profile_request);
      const uint64_t id = entry->job.id();
      next_id_ = std::max(next_id_, id + 1);
      entry->stored = true;  // as read; a change ResumeOrRefuseLocked makes is stored, or marked not
      if (std::optional<v1::Event> event = ResumeOrRefuseLocked(*entry)) events.push_back(std::move(*event));
      jobs_[id] = std::move(entry);
    }
    const size_t loaded = jobs_.size();
    TrimLocked();
    spdlog::info("event=jobs_loaded stored={} in_memory={} queued_again={}", loaded, jobs_.size(), queue_.size());
  }
  for (v1::Event& event : events) events_.Emit(std::move(event));
  worker_ = std::thread([this] { Worker(); });
  return Status::Ok();
}

// A job left queued runs again; one left running was interrupted by a crash
// (a clean stop stores it as queued), and one that crashed the daemon twice is
// not run a third time. A stored request that today's rules refuse fails with the reason.
std::optional<v1::Event> JobManager::ResumeOrRefuseLocked(Entry& entry) {
  v1::Job& job = entry.job;
  const v1::Job::State state = job.state();
  if (state != v1::Job::STATE_QUEUED && state != v1::Job::STATE_RUNNING) return std::nullopt;
  if (state == v1::Job::STATE_RUNNING) job.set_crashes(job.crashes() + 1);
  const Status valid = job.kind() == "profile" ? CheckProfileRequest(entry.request, store_)
                       : job.kind() == "train" ? CheckTrainRequest(job.train_request(), store_, train_data_dirs_)
                                               : Status::Ok();
  if (!valid.ok()) {
    job.set_state(v1::Job::STATE_FAILED);
    job.set_message("not run: " + valid.message());
  } else if (job.crashes() >= kMaxCrashes) {
    job.set_state(v1::Job::STATE_FAILED);
    job.set_message("poisoned: the daemon died " + std::to_string(job.crashes()) +
                    " times while running this job, so it is not run again (`edgecost jobs forget " +
                    std::to_string(job.id()) + "` removes it)");
  } else {
    job.set_state(v1::Job::STATE_QUEUED);
    job.set_message("queued again: the daemon " + std::string(state == v1::Job::STATE_RUNNING
                                                                  ? "died while it was running"
                                                                  : "stopped while it was queued"));
    queue_.push_back(job.id());
  }
  StoreLocked(entry);
  if (job.state() != v1::Job::STATE_FAILED) return std::nullopt;
  // A train run the daemon died in left its page files; no run of this job will remove them now.
  // The worker has not started, so no pager of this process owns a file.
  if (state == v1::Job::STATE_RUNNING && job.kind() == "train") {
    const std::string paging_dir = service::DefaultPagingDir(store_.path());
    const int removed = train::Pager::RemoveStaleFiles(paging_dir, /*own_too=*/true);
    spdlog::info("event=page_files_removed job={} dir={} files={}", job.id(), Quoted(paging_dir), removed);
  }
  spdlog::warn("event=job id={} kind={} state=STATE_FAILED message={}", job.id(), job.kind(), Quoted(job.message()));
  v1::Event event;
  event.set_kind("job");
  event.set_message(job.message());
  *event.mutable_job() = job;
  return event;
}

void JobManager::Shutdown() {
  {
    std::lock_guard lock(mutex_);
    shutting_down_ = true;
    for (auto& [id, entry] : jobs_) entry->stop = true;
  }
  work_ready_.notify_all();
}

// A write that fails leaves the job running; the next update tries again.
void JobManager::StoreLocked(Entry& entry) {
  if (!db_) return;
  const Status s = db_->PutJob({entry.job, entry.request});
  entry.stored = s.ok();
  if (!s.ok()) spdlog::error("event=job_not_stored id={} message={}", entry.job.id(), Quoted(s.message()));
}

namespace {

bool Finished(const v1::Job& job) {
  return job.state() != v1::Job::STATE_QUEUED && job.state() != v1::Job::STATE_RUNNING;
}

}  // namespace

void JobManager::TrimLocked() {
  size_t finished = 0;
  for (const auto& [id, entry] : jobs_) finished += Finished(entry->job) ? 1 : 0;
  for (auto it = jobs_.begin(); it != jobs_.end() && finished > finished_in_memory_;) {  // oldest first
    Entry& entry = *it->second;
    if (!Finished(entry.job) || !entry.stored || &entry == running_) {
      ++it;
      continue;
    }
    max_dropped_id_ = std::max(max_dropped_id_, it->first);
    ++dropped_by_state_[v1::Job::State_Name(entry.job.state())];
    it = jobs_.erase(it);
    --finished;
  }
}

void JobManager::SetStopped(const Entry& entry, v1::Job& job, const std::string& what_was_done) {
  if (entry.cancelled) {
    job.set_state(v1::Job::STATE_CANCELLED);
    job.set_message("cancelled; " + what_was_done);
  } else {  // stored as queued: the next start runs it again
    job.set_state(v1::Job::STATE_QUEUED);
    job.set_message("stopped by the daemon's shutdown; " + what_was_done + "; resumes at the next start");
  }
}

Result<v1::Job> JobManager::Enqueue(std::unique_ptr<Entry> entry, const std::string& kind, const std::string& message) {
  std::unique_lock lock(mutex_);
  if (shutting_down_) return Unavailable("the daemon is shutting down");
  if (!db_) return Unavailable("the daemon is starting; try again");
  if (queue_.size() >= kMaxQueuedJobs) {
    return ResourceExhausted(std::to_string(queue_.size()) + " jobs are waiting; try again when some have run");
  }
  entry->job.set_id(next_id_++);
  entry->job.set_kind(kind);
  entry->job.set_state(v1::Job::STATE_QUEUED);
  entry->job.set_created_at(NowRfc3339());
  entry->job.set_message(message);
  StoreLocked(*entry);
  spdlog::info("event=job id={} kind={} state=STATE_QUEUED message={}", entry->job.id(), kind, Quoted(message));
  const v1::Job job = entry->job;
  queue_.push_back(job.id());
  jobs_[job.id()] = std::move(entry);
  lock.unlock();
  v1::Event event;
  event.set_kind("job");
  event.set_message(job.message());
  *event.mutable_job() = job;
  events_.Emit(event);
  work_ready_.notify_all();
  return job;
}

namespace {

// The model a job names, as the job will load it: the zoo or a stored ONNX model.
Result<graph::GraphSpec> JobModel(const std::string& model, uint32_t batch_size, costdb::Store& store) {
  EC_RETURN_IF_ERROR(graph::CheckModelName(model));
  if (batch_size > static_cast<uint32_t>(graph::kMaxBatchSize)) {
    return InvalidArgument("batch_size is at most " + std::to_string(graph::kMaxBatchSize));
  }
  graph::GraphSpec spec;
  spec.model_or_file = model;
  spec.batch_size = std::max<int>(1, static_cast<int>(batch_size));
  EC_ASSIGN_OR_RETURN(spec, service::ResolveModel(store, std::move(spec)));
  if (graph::CarriesCosts(spec)) {
    return InvalidArgument("'" + model +
                           "' is a stored graph with its own costs and no ops to run; name a zoo model "
                           "or an ONNX model (`edgecost models` lists them)");
  }
  return spec;
}

}  // namespace

Status CheckProfileRequest(const v1::StartProfileRequest& request, costdb::Store& store) {
  EC_RETURN_IF_ERROR(JobModel(request.model(), request.batch_size(), store).status());
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  if (request.threads() > cores) {
    return InvalidArgument("threads is at most " + std::to_string(cores) + " here, the number of cores");
  }
  return Status::Ok();
}

Result<v1::Job> JobManager::StartProfile(const v1::StartProfileRequest& request) {
  EC_RETURN_IF_ERROR(CheckProfileRequest(request, store_));
  auto entry = std::make_unique<Entry>();
  entry->request = request;
  entry->job.set_model(request.model());
  return Enqueue(std::move(entry), "profile", "queued: profile " + request.model());
}

namespace {

std::string JoinDirs(const std::vector<std::string>& dirs) {
  std::string text;
  for (const std::string& dir : dirs) text += (text.empty() ? "" : ", ") + dir;
  return text;
}

// Whether `path` is `dir` or lies below it; both absolute and normal ("/data" holds not "/data2").
bool Inside(const std::filesystem::path& path, const std::filesystem::path& dir) {
  const std::string file = path.string(), folder = dir.string();
  if (file == folder) return true;
  const std::string prefix = folder.ends_with('/') ? folder : folder + "/";
  return file.starts_with(prefix);
}

}  // namespace

namespace {

// One file or folder of a data set, resolved and checked against the allowed directories.
Result<std::filesystem::path> ResolveInside(const std::string& path, const std::vector<std::string>& data_dirs) {
  namespace fs = std::filesystem;
  const fs::path given = fs::path(path).is_absolute() ? fs::path(path) : fs::path(data_dirs.front()) / path;
  std::error_code error;
  const fs::path resolved = fs::canonical(given, error);  // symlinks and `..` resolved, as open() would
  // A path that does not resolve is judged by its text alone, so that the answer tells nothing
  // about what exists outside the allowed directories.
  const fs::path judged = error ? given.lexically_normal() : resolved;
  for (const std::string& dir : data_dirs) {
    std::error_code dir_error;
    const fs::path allowed = fs::canonical(dir, dir_error);
    if (dir_error || !Inside(judged, allowed)) continue;
    if (error) return NotFound("no data set " + path + " in " + dir + ": " + error.message());
    return resolved;
  }
  return PermissionDenied("data set " + path + " is outside the directories this agent reads data from (" +
                          JoinDirs(data_dirs) + ", its config's [train] data_dirs)");
}

// What the loader reads beyond the path itself (train/data.cc): every file below an image folder
// (directory symlinks followed), and the labels .npy beside an inputs .npy, whose name depends on
// the keys: every .npy beside it is checked. Each must resolve inside the allowed directories too.
Status CheckWhatItReads(const std::filesystem::path& resolved, const std::vector<std::string>& data_dirs) {
  namespace fs = std::filesystem;
  constexpr size_t kMaxEntries = 1'000'000;  // a bound on the walk of a folder that loops
  std::error_code error;
  size_t entries = 0;
  auto check = [&](const fs::path& entry) -> Status {
    if (++entries > kMaxEntries) return InvalidArgument(resolved.string() + " holds more than a million entries");
    return ResolveInside(entry.string(), data_dirs).status();
  };
  if (fs::is_directory(resolved, error)) {
    for (auto it = fs::recursive_directory_iterator(resolved, fs::directory_options::follow_directory_symlink, error);
         !error && it != fs::recursive_directory_iterator(); it.increment(error)) {
      EC_RETURN_IF_ERROR(check(it->path()));
    }
  } else if (resolved.extension() == ".npy") {
    for (const fs::directory_entry& entry : fs::directory_iterator(resolved.parent_path(), error)) {
      if (entry.path().extension() == ".npy") EC_RETURN_IF_ERROR(check(entry.path()));
    }
  }
  return Status::Ok();
}

}  // namespace

Result<std::string> ResolveTrainData(const std::string& path, const std::vector<std::string>& data_dirs) {
  if (data_dirs.empty()) {
    return PermissionDenied(
        "this agent reads no data sets for train jobs: list the directories they may come from "
        "in its config's [train] data_dirs (`edgecost serve --check-config` shows them)");
  }
  // INPUTS.npy,LABELS.npy names two files: each is resolved, as the reader splits them.
  EC_ASSIGN_OR_RETURN(const std::vector<std::string> paths, train::DataPaths(path));
  std::string resolved_paths;
  for (const std::string& part : paths) {
    EC_ASSIGN_OR_RETURN(const std::filesystem::path resolved, ResolveInside(part, data_dirs));
    EC_RETURN_IF_ERROR(CheckWhatItReads(resolved, data_dirs));
    resolved_paths += (resolved_paths.empty() ? "" : ",") + resolved.string();
  }
  return resolved_paths;
}

std::string TrainedModelDir(const std::string& db_path) {
  return (std::filesystem::path(db_path).parent_path() / "trained").string();
}

Status CheckTrainRequest(const v1::StartTrainRequest& request, costdb::Store& store,
                         const std::vector<std::string>& data_dirs) {
  v1::StartProfileRequest model;
  model.set_model(request.model());
  model.set_threads(request.threads());
  model.set_batch_size(request.batch_size());
  EC_RETURN_IF_ERROR(CheckProfileRequest(model, store));  // the same rules for the model and the threads
  if (request.steps() > 100000) return InvalidArgument("steps is at most 100000");
  // The layers hold a few copies of every activation: refuse what would not fit in memory.
  EC_ASSIGN_OR_RETURN(graph::GraphSpec spec, JobModel(request.model(), request.batch_size(), store));
  spec.derivation = graph::Derivation::kExact;
  EC_ASSIGN_OR_RETURN(v1::TrainingGraph graph, graph::LoadTrainingGraph(spec));
  uint64_t activation_bytes = 0;
  for (const v1::TrainingNode& node : graph.nodes()) activation_bytes += node.output_bytes();
  const uint64_t memory_bytes =
      static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  if (activation_bytes > memory_bytes / 8) {
    return ResourceExhausted("training " + request.model() + " at batch size " + std::to_string(request.batch_size()) +
                             " needs about " + std::to_string(4 * activation_bytes) +
                             " B of memory, more than half of " + "this machine's; use a smaller batch");
  }
  if (!(request.lr() >= 0) || request.lr() > 1e6) return InvalidArgument("lr must be a positive number");
  EC_RETURN_IF_ERROR(service::OptimizerOptionsOf(request.optimizer()).status());
  EC_RETURN_IF_ERROR(service::LrScheduleOptionsOf(request.lr_schedule(),
                                                  request.steps() > 0 ? static_cast<int>(request.steps()) : 10,
                                                  request.lr() > 0 ? request.lr() : 0.01)
                         .status());
  if (!(request.runtime_budget_multiple() == 0 || request.runtime_budget_multiple() >= 1) ||
      request.runtime_budget_multiple() > 1e6) {
    return InvalidArgument("runtime_budget_multiple must be at least 1");
  }
  const int budgets = (request.activation_budget_bytes() != 0) + (request.process_ram_budget_bytes() != 0) +
                      (request.activation_budget_percent() != 0);
  if (request.schedule_id() != 0 && budgets > 0) {
    return InvalidArgument(
        "give schedule_id or a budget (process_ram_budget_bytes, activation_budget_bytes or "
        "activation_budget_percent), not both");
  }
  if (budgets > 1) {
    return InvalidArgument(
        "give one budget: process_ram_budget_bytes (the RAM budget, the whole process) or activation_budget_bytes or "
        "activation_budget_percent (the activation budget)");
  }
  if (!(request.activation_budget_percent() >= 0)) return InvalidArgument("activation_budget_percent must be positive");
  if (!request.strategy().empty() && !solver::ParseStrategy(request.strategy()).ok()) {
    return InvalidArgument("unknown strategy '" + request.strategy() + "'; use " + solver::StrategyNames());
  }
  if (!request.cost_source().empty() && request.cost_source() != "measured" &&
      request.cost_source() != service::kMeasuredInStepSource && request.cost_source() != service::kAutoCostSource) {
    return InvalidArgument("cost_source is measured, measured-in-step or auto");
  }
  if (request.keep_model()) {
    EC_ASSIGN_OR_RETURN(std::optional<graph::OnnxModel> onnx, graph::LoadOnnxModel(spec));
    if (!onnx) {
      return InvalidArgument("keep_model keeps an ONNX model's trained weights; '" + request.model() +
                             "' is a zoo model, with no file to write them into");
    }
  }
  for (const std::string* data : {&request.data(), &request.val_data()}) {
    if (!data->empty()) EC_RETURN_IF_ERROR(ResolveTrainData(*data, data_dirs).status());
  }
  if (request.data().empty() && (request.epochs() > 0 || request.val_split() > 0 || !request.val_data().empty())) {
    return InvalidArgument("epochs, val_split and val_data need a data set (data)");
  }
  if (!(request.val_split() >= 0 && request.val_split() < 1)) return InvalidArgument("val_split is from 0 to below 1");
  if (request.epochs() > 100000) return InvalidArgument("epochs is at most 100000");
  return service::TrainJobOptionsOf(request, store).status();  // trainable, budgets, data keys
}

Result<v1::Job> JobManager::StartTrain(const v1::StartTrainRequest& request) {
  EC_RETURN_IF_ERROR(CheckTrainRequest(request, store_, train_data_dirs_));
  auto entry = std::make_unique<Entry>();
  *entry->job.mutable_train_request() = request;
  entry->job.set_model(request.model());
  return Enqueue(std::move(entry), "train", "queued: train " + request.model());
}

Result<v1::Job> JobManager::StartRegeneration(const std::string& why) {
  return Enqueue(std::make_unique<Entry>(), "regenerate", "queued: regenerate stored schedules (" + why + ")");
}

Result<v1::Job> JobManager::Get(uint64_t id) {
  std::lock_guard lock(mutex_);
  auto it = jobs_.find(id);
  if (it != jobs_.end()) return it->second->job;
  // Only an id at or below the newest dropped one can be in the database alone.
  if (id > max_dropped_id_ || !db_) return NotFound("no job " + std::to_string(id));
  EC_ASSIGN_OR_RETURN(std::optional<costdb::StoredJob> stored, db_->GetJob(id));
  if (!stored) return NotFound("no job " + std::to_string(id));  // forgotten
  return stored->job;
}

Result<v1::Job> JobManager::Cancel(uint64_t id) {
  Entry* entry = nullptr;
  {
    std::unique_lock lock(mutex_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) {
      lock.unlock();
      return Get(id);  // a finished job only in the database stays as it is
    }
    entry = it->second.get();
    entry->cancelled = true;
    if (entry->job.state() != v1::Job::STATE_QUEUED) {
      entry->stop = true;  // a running job stops at its next op; a finished one stays as it is
      return entry->job;
    }
    std::erase(queue_, id);
  }
  Update(*entry, [](v1::Job& job) {
    job.set_state(v1::Job::STATE_CANCELLED);
    job.set_message("cancelled before it started");
  });
  return Get(id);
}

Result<std::vector<v1::Job>> JobManager::List(size_t limit) {
  if (limit == 0) return std::vector<v1::Job>();
  std::lock_guard lock(mutex_);
  std::map<uint64_t, v1::Job> newest;  // by id
  for (auto it = jobs_.rbegin(); it != jobs_.rend() && newest.size() < limit; ++it) newest[it->first] = it->second->job;
  // Dropped jobs are older than every job memory answered with, unless memory ran out first.
  const bool complete = newest.size() == limit && newest.begin()->first > max_dropped_id_;
  if (!complete && max_dropped_id_ > 0 && db_) {
    EC_ASSIGN_OR_RETURN(std::vector<costdb::StoredJob> stored, db_->ListJobs(max_dropped_id_, limit));
    for (costdb::StoredJob& s : stored) newest.try_emplace(s.job.id(), std::move(s.job));  // memory's is newer
    while (newest.size() > limit) newest.erase(newest.begin());
  }
  std::vector<v1::Job> jobs;
  jobs.reserve(newest.size());
  for (auto& [id, job] : newest) jobs.push_back(std::move(job));
  return jobs;
}

std::map<std::string, int64_t> JobManager::CountByState() {
  std::lock_guard lock(mutex_);
  std::map<std::string, int64_t> counts = dropped_by_state_;
  for (const auto& [id, entry] : jobs_) ++counts[v1::Job::State_Name(entry->job.state())];
  return counts;
}

void JobManager::Update(Entry& entry, const std::function<void(v1::Job&)>& change) {
  v1::Event event;
  {
    std::lock_guard lock(mutex_);
    const v1::Job::State before = entry.job.state();
    change(entry.job);
    spdlog::log(entry.job.state() != before ? spdlog::level::info : spdlog::level::debug,
                "event=job id={} kind={} state={} progress={:.2f} message={}", entry.job.id(), entry.job.kind(),
                v1::Job::State_Name(entry.job.state()), entry.job.progress(), Quoted(entry.job.message()));
    StoreLocked(entry);
    event.set_kind("job");
    event.set_message(entry.job.message());
    *event.mutable_job() = entry.job;
    TrimLocked();  // `entry` may be gone from here on
  }
  events_.Emit(std::move(event));
}

void JobManager::Worker() {
  while (true) {
    Entry* entry = nullptr;
    {
      std::unique_lock lock(mutex_);
      work_ready_.wait(lock, [&] { return shutting_down_ || !queue_.empty(); });
      if (shutting_down_) return;
      entry = jobs_.at(queue_.front()).get();
      queue_.pop_front();
      running_ = entry;
    }
    Update(*entry, [](v1::Job& job) {
      job.set_state(v1::Job::STATE_RUNNING);
      job.set_message("running");
    });
    try {
      if (entry->job.kind() == "profile") {
        RunProfile(*entry);
      } else if (entry->job.kind() == "train") {
        RunTrain(*entry);
      } else {
        RunRegeneration(*entry);
      }
    } catch (const std::exception& e) {  // a job's failure is the job's, never the daemon's
      spdlog::error("event=job_exception id={} what={}", entry->job.id(), Quoted(e.what()));
      Update(*entry, [&](v1::Job& job) {
        job.set_state(v1::Job::STATE_FAILED);
        job.set_message(std::string("internal error: ") + e.what());
      });
    }
    std::lock_guard lock(mutex_);
    running_ = nullptr;
    TrimLocked();
  }
}

void JobManager::RunProfile(Entry& entry) {
  service::ProfileJobOptions options;
  options.database = &store_;
  options.probes_config = probes_config_;
  options.graph.model_or_file = entry.request.model();
  options.graph.batch_size = std::max<int>(1, static_cast<int>(entry.request.batch_size()));
  options.threads = static_cast<int>(entry.request.threads());
  options.force = entry.request.force();
  options.accept_noisy = entry.request.accept_noisy();
  options.calibrate = entry.request.calibrate();
  options.in_step = !entry.request.isolated_only();
  options.edgecost_binary = edgecost_binary_;
  double last_reported = -1;
  int last_round = 0;
  auto progress = [&](const profiler::ProfileProgress& p) {
    const double fraction = p.total ? static_cast<double>(p.done) / p.total : 1.0;
    if (p.round != last_round) last_reported = -1;  // a new pass of disturbed ops: reported from its start
    last_round = p.round;
    if (fraction - last_reported < 0.05 && p.done != p.total) return;  // an event per 5%, not per op
    last_reported = fraction;
    Update(entry, [&](v1::Job& job) {
      if (p.round == 0) {
        job.set_progress(fraction);
        job.set_message("op " + std::to_string(p.done) + "/" + std::to_string(p.total));
      } else {  // the first pass is done; its progress stays
        job.set_message("disturbed ops measured again, round " + std::to_string(p.round) + " of at most " +
                        std::to_string(p.rounds) + ": op " + std::to_string(p.done) + "/" + std::to_string(p.total));
      }
    });
  };
  auto log = [&](const std::string& line) { Update(entry, [&](v1::Job& job) { job.set_message(line); }); };
  Result<service::ProfileJobResult> result =
      service::RunProfileJob(options, &entry.stop, progress, log, "start the profile with accept_noisy");
  Update(entry, [&](v1::Job& job) {
    if (!result.ok()) {
      job.set_state(v1::Job::STATE_FAILED);
      job.set_message(result.status().message());
    } else if (result->summary.interrupted) {
      SetStopped(entry, job, std::to_string(result->summary.measured) + " ops measured and kept");
    } else if (!result->ok()) {
      // Noisy, not accepted, and no in-step table: the op costs are stored marked unreliable.
      job.set_state(v1::Job::STATE_FAILED);
      job.set_message((result->noisy_message.empty() ? result->in_step_skipped : result->noisy_message) +
                      "; no cost table to predict from");
      *job.mutable_profile() = service::ToProto(*result);
    } else {
      job.set_state(v1::Job::STATE_SUCCEEDED);
      job.set_progress(1);
      const int64_t table = result->in_step ? result->in_step->in_step_table_id : result->cost_table_id;
      job.set_message("cost table #" + std::to_string(table) + " stored" +
                      (result->noisy_message.empty() ? "" : "; " + result->noisy_message) +
                      (result->in_step_skipped.empty() ? "" : "; " + result->in_step_skipped));
      *job.mutable_profile() = service::ToProto(*result);
    }
  });
}

// The job in a training process of its own (`edgecost train-job`), so that its peak RSS is its own
// and none of the agent's other work lands in it; progress and log lines come back on its stderr.
Result<service::TrainJobResult> JobManager::RunTrainInChild(
    Entry& entry, const v1::StartTrainRequest& request, const service::TrainJobOptions& options,
    const std::function<void(const service::TrainProgress&)>& progress,
    const std::function<void(const std::string&)>& log) {
  const std::filesystem::path request_path =
      std::filesystem::temp_directory_path() /
      ("edgecost-train-job-" + std::to_string(::getpid()) + "-" + std::to_string(entry.job.id()) + ".json");
  EC_ASSIGN_OR_RETURN(const std::string json, proto::ToJson(request));
  EC_RETURN_IF_ERROR(WriteFileAtomically(request_path.string(), json));
  std::vector<std::string> argv = {edgecost_binary_, "--db", store_.path(), "train-job", "--request", request_path.string()};
  if (!options.out_onnx.empty()) argv.insert(argv.end(), {"--out", options.out_onnx});
  if (!options.probes_config.empty()) argv.insert(argv.end(), {"--probes-config", options.probes_config});
  std::string error;
  const Result<ProcessResult> process = RunProcess(
      argv,
      [&](const std::string& line) {
        v1::TrainJobProgress reported;
        if (line.starts_with("progress: ") && proto::FromJson(line.substr(10), &reported).ok()) {
          progress({static_cast<int>(reported.step()), static_cast<int>(reported.steps()), reported.loss(),
                    reported.step_runtime_s(), reported.has_epoch() ? &reported.epoch() : nullptr,
                    static_cast<int64_t>(reported.held_out_records()),
                    static_cast<int64_t>(reported.batches_per_epoch())});
        } else if (line.starts_with("edgecost: error: ")) {
          error = line.substr(17);
        } else {
          log(line);
        }
      },
      &entry.stop);
  std::error_code ignored;
  std::filesystem::remove(request_path, ignored);
  if (!process.ok()) return process.status();
  if (process->exit_code != 0) {
    if (entry.stop) return Status(ErrorCode::kCancelled, error);
    return FailedPrecondition(error.empty() ? "the training process ended with status " +
                                                  std::to_string(process->exit_code)
                                            : error);
  }
  service::TrainJobResult result;
  EC_RETURN_IF_ERROR(proto::FromJson(process->stdout_text, &result.run));
  result.run_id = static_cast<int64_t>(result.run.id());
  return result;
}

void JobManager::RunTrain(Entry& entry) {
  v1::StartTrainRequest request = entry.job.train_request();
  // The data sets are resolved again: a symlink may have changed since the request was checked.
  Status data_status = Status::Ok();
  for (std::string* given : {request.mutable_data(), request.mutable_val_data()}) {
    if (given->empty()) continue;
    Result<std::string> path = ResolveTrainData(*given, train_data_dirs_);
    if (!path.ok()) data_status = path.status();
    *given = path.ok() ? *path : std::string();
  }
  Result<service::TrainJobOptions> mapped = service::TrainJobOptionsOf(request, store_);  // checked at StartTrain
  if (!mapped.ok() && data_status.ok()) data_status = mapped.status();
  service::TrainJobOptions options = mapped.ok() ? *mapped : service::TrainJobOptions();
  options.probes_config = probes_config_;
  if (request.keep_model()) {
    const std::filesystem::path dir = TrainedModelDir(store_.path());
    std::error_code error;
    std::filesystem::create_directories(dir, error);
    options.out_onnx = (dir / ("job-" + std::to_string(entry.job.id()) + ".onnx")).string();
  }
  auto progress = [&](const service::TrainProgress& p) {
    Update(entry, [&](v1::Job& job) {
      job.set_progress(static_cast<double>(p.step) / p.steps);
      v1::TrainJobProgress& reported = *job.mutable_train_progress();
      reported.set_step(static_cast<uint32_t>(p.step));
      reported.set_steps(static_cast<uint32_t>(p.steps));
      reported.set_loss(p.loss);
      reported.set_step_runtime_s(p.runtime_s);
      if (p.epoch) {  // the same step again, after its epoch's held-out evaluation
        *reported.mutable_epoch() = *p.epoch;
        reported.set_held_out_records(static_cast<uint64_t>(p.held_out_records));
        reported.set_batches_per_epoch(static_cast<uint32_t>(p.batches_per_epoch));
        job.set_message(service::EpochLine(*p.epoch, p.batches_per_epoch, p.held_out_records));
      } else {
        reported.clear_epoch();
        job.set_message("step " + std::to_string(p.step) + "/" + std::to_string(p.steps) + ", loss " +
                        std::to_string(p.loss));
      }
    });
  };
  auto log = [&](const std::string& line) { Update(entry, [&](v1::Job& job) { job.set_message(line); }); };
  Result<service::TrainJobResult> result =
      !data_status.ok()         ? Result<service::TrainJobResult>(data_status)
      : edgecost_binary_.empty() ? service::RunTrainJob(options, &entry.stop, progress, log)
                                 : RunTrainInChild(entry, request, options, progress, log);
  Update(entry, [&](v1::Job& job) {
    if (!result.ok() && result.status().code() == ErrorCode::kCancelled) {
      SetStopped(entry, job, "no run record stored");
    } else if (!result.ok()) {
      job.set_state(v1::Job::STATE_FAILED);
      job.set_message(result.status().message());
    } else {
      job.set_state(v1::Job::STATE_SUCCEEDED);
      job.set_progress(1);
      *job.mutable_train_run() = result->run;
      job.mutable_train_run()->clear_step_stats();  // they grow with the steps: GetTrainRun has them
      const v1::TrainRun& run = result->run;
      std::string message = "training run #" + std::to_string(result->run_id) + " stored: step " +
                            FormatSeconds(run.runtime_s()) + " (predicted " + FormatSeconds(run.predicted_runtime_s()) +
                            "), peak activations " + FormatBytes(static_cast<double>(run.peak_activation_bytes())) +
                            " (planned " + FormatBytes(static_cast<double>(run.predicted_peak_bytes())) + ")";
      if (run.has_verify()) message += run.verify().identical() ? ", gradients identical" : ", gradients DIFFER";
      job.set_message(message);
    }
  });
}

void JobManager::RunRegeneration(Entry& entry) {
  Result<costdb::CostDb*> db = store_.Db();
  Result<std::vector<std::pair<int64_t, v1::ScheduleRequest>>> requests =
      db.ok() ? (*db)->ListScheduleRequests() : Result<std::vector<std::pair<int64_t, v1::ScheduleRequest>>>(db.status());
  if (!requests.ok()) {
    Update(entry, [&](v1::Job& job) {
      job.set_state(v1::Job::STATE_FAILED);
      job.set_message(requests.status().message());
    });
    return;
  }
  v1::RegenerateResult done;
  for (size_t i = 0; i < requests->size() && !entry.stop; ++i) {
    const v1::ScheduleRequest& request = (*requests)[i].second;
    Result<service::SolvedRequest> result = service::SolveRequest(*db, request);
    v1::Event event;
    event.set_kind("schedule");
    if (result.ok()) {
      done.add_schedule_ids(static_cast<uint64_t>(result->schedule_id));
      event.set_schedule_id(static_cast<uint64_t>(result->schedule_id));
      event.set_message("schedule #" + std::to_string(result->schedule_id) + " regenerated for " + request.model());
    } else {
      done.set_failed(done.failed() + 1);
      event.set_message("request #" + std::to_string((*requests)[i].first) + " (" + request.model() +
                        ") not regenerated: " + result.status().message());
    }
    events_.Emit(std::move(event));
    Update(entry, [&](v1::Job& job) { job.set_progress(static_cast<double>(i + 1) / requests->size()); });
  }
  Update(entry, [&](v1::Job& job) {
    const std::string counts = std::to_string(done.schedule_ids_size()) + " schedules regenerated, " +
                               std::to_string(done.failed()) + " failed";
    if (entry.stop) return SetStopped(entry, job, counts);
    job.set_state(done.failed() ? v1::Job::STATE_FAILED : v1::Job::STATE_SUCCEEDED);
    job.set_message(counts);
    *job.mutable_regenerate() = done;
  });
}

}  // namespace edgecost::daemon
