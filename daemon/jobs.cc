#include "daemon/jobs.h"

#include <chrono>
#include <ctime>

#include "graph/zoo.h"
#include "costdb/costdb.h"
#include "profiler/cost_tables.h"
#include "profiler/profile_job.h"

namespace edgecost::daemon {
namespace {

constexpr size_t kMaxEvents = 10000;  // older events are dropped; sequences keep counting
constexpr double kMaxWatchS = 60;

std::string NowRfc3339() {
  const std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return text;
}

}  // namespace

JobManager::JobManager(std::string db_path) : db_path_(std::move(db_path)), worker_([this] { Worker(); }) {}

JobManager::~JobManager() {
  Shutdown();
  if (worker_.joinable()) worker_.join();
}

void JobManager::Shutdown() {
  std::lock_guard lock(mutex_);
  shutting_down_ = true;
  for (auto& [id, entry] : jobs_) entry->stop = true;
  work_ready_.notify_all();
  event_ready_.notify_all();
}

Result<v1::Job> JobManager::Enqueue(std::unique_ptr<Entry> entry, const std::string& kind, const std::string& message) {
  std::unique_lock lock(mutex_);
  if (shutting_down_) return Unavailable("the daemon is shutting down");
  entry->job.set_id(next_id_++);
  entry->job.set_kind(kind);
  entry->job.set_state(v1::Job::STATE_QUEUED);
  entry->job.set_created_at(NowRfc3339());
  entry->job.set_message(message);
  const v1::Job job = entry->job;
  queue_.push_back(job.id());
  jobs_[job.id()] = std::move(entry);
  lock.unlock();
  v1::Event event;
  event.set_kind("job");
  event.set_message(job.message());
  *event.mutable_job() = job;
  Emit(event);
  work_ready_.notify_all();
  return job;
}

Result<v1::Job> JobManager::StartProfile(const v1::StartProfileRequest& request) {
  if (request.model().empty()) return InvalidArgument("model is required");
  auto entry = std::make_unique<Entry>();
  entry->request = request;
  return Enqueue(std::move(entry), "profile", "queued: profile " + request.model());
}

Result<v1::Job> JobManager::StartRegeneration(const std::string& why) {
  return Enqueue(std::make_unique<Entry>(), "regenerate", "queued: regenerate stored schedules (" + why + ")");
}

Result<v1::Job> JobManager::Get(uint64_t id) {
  std::lock_guard lock(mutex_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return NotFound("no job " + std::to_string(id));
  return it->second->job;
}

Result<v1::Job> JobManager::Cancel(uint64_t id) {
  Entry* entry = nullptr;
  {
    std::lock_guard lock(mutex_);
    auto it = jobs_.find(id);
    if (it == jobs_.end()) return NotFound("no job " + std::to_string(id));
    entry = it->second.get();
    entry->stop = true;
    if (entry->job.state() != v1::Job::STATE_QUEUED) return entry->job;  // the worker notices at the next op
    std::erase(queue_, id);
  }
  Update(*entry, [](v1::Job& job) {
    job.set_state(v1::Job::STATE_CANCELLED);
    job.set_message("cancelled before it started");
  });
  return Get(id);
}

std::vector<v1::Job> JobManager::List() {
  std::lock_guard lock(mutex_);
  std::vector<v1::Job> jobs;
  for (const auto& [id, entry] : jobs_) jobs.push_back(entry->job);
  return jobs;
}

void JobManager::Emit(v1::Event event) {
  std::lock_guard lock(mutex_);
  const uint64_t sequence = events_.empty() ? 1 : events_.back().sequence() + 1;
  event.set_sequence(sequence);
  events_.push_back(std::move(event));
  if (events_.size() > kMaxEvents) events_.erase(events_.begin(), events_.begin() + kMaxEvents / 10);
  event_ready_.notify_all();
}

std::vector<v1::Event> JobManager::Watch(uint64_t after_sequence, double wait_s) {
  std::unique_lock lock(mutex_);
  auto newer = [&] { return !events_.empty() && events_.back().sequence() > after_sequence; };
  event_ready_.wait_for(lock, std::chrono::duration<double>(std::min(std::max(wait_s, 0.0), kMaxWatchS)),
                        [&] { return newer() || shutting_down_; });
  std::vector<v1::Event> out;
  for (const v1::Event& e : events_) {
    if (e.sequence() > after_sequence) out.push_back(e);
  }
  return out;
}

void JobManager::Update(Entry& entry, const std::function<void(v1::Job&)>& change) {
  v1::Event event;
  {
    std::lock_guard lock(mutex_);
    change(entry.job);
    event.set_kind("job");
    event.set_message(entry.job.message());
    *event.mutable_job() = entry.job;
  }
  Emit(std::move(event));
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
    }
    Update(*entry, [](v1::Job& job) {
      job.set_state(v1::Job::STATE_RUNNING);
      job.set_message("running");
    });
    if (entry->job.kind() == "profile") {
      RunProfile(*entry);
    } else {
      RunRegeneration(*entry);
    }
  }
}

void JobManager::RunProfile(Entry& entry) {
  profiler::ProfileJobOptions options;
  options.db_path = db_path_;
  options.graph.model_or_file = entry.request.model();
  options.graph.derivation = graph::Derivation::kExact;
  options.threads = static_cast<int>(entry.request.threads());
  options.force = entry.request.force();
  double last_reported = -1;
  auto progress = [&](const profiler::ProfileProgress& p) {
    const double fraction = p.total ? static_cast<double>(p.done) / p.total : 1.0;
    if (fraction - last_reported < 0.05 && p.done != p.total) return;  // an event per 5%, not per op
    last_reported = fraction;
    Update(entry, [&](v1::Job& job) {
      job.set_progress(fraction);
      job.set_message("op " + std::to_string(p.done) + "/" + std::to_string(p.total));
    });
  };
  auto log = [&](const std::string& line) { Update(entry, [&](v1::Job& job) { job.set_message(line); }); };
  Result<profiler::ProfileJobResult> result = profiler::RunProfileJob(options, &entry.stop, progress, log);
  Update(entry, [&](v1::Job& job) {
    if (!result.ok()) {
      job.set_state(v1::Job::STATE_FAILED);
      job.set_message(result.status().message());
    } else if (result->summary.interrupted) {
      job.set_state(v1::Job::STATE_CANCELLED);
      job.set_message("stopped; " + std::to_string(result->summary.measured) + " ops measured and kept");
    } else {
      job.set_state(v1::Job::STATE_SUCCEEDED);
      job.set_progress(1);
      job.set_message("cost table #" + std::to_string(result->cost_table_id) + " stored");
    }
  });
}

void JobManager::RunRegeneration(Entry& entry) {
  Result<costdb::CostDb> db = costdb::CostDb::Open(db_path_, costdb::OpenMode::kReadWrite);
  Result<std::vector<std::pair<int64_t, v1::ScheduleRequest>>> requests =
      db.ok() ? db->ListScheduleRequests() : Result<std::vector<std::pair<int64_t, v1::ScheduleRequest>>>(db.status());
  if (!requests.ok()) {
    Update(entry, [&](v1::Job& job) {
      job.set_state(v1::Job::STATE_FAILED);
      job.set_message(requests.status().message());
    });
    return;
  }
  int solved = 0, failed = 0;
  for (size_t i = 0; i < requests->size() && !entry.stop; ++i) {
    const v1::ScheduleRequest& request = (*requests)[i].second;
    Result<profiler::SolvedRequest> result = profiler::SolveRequest(&*db, request);
    v1::Event event;
    event.set_kind("schedule");
    if (result.ok()) {
      ++solved;
      event.set_schedule_id(static_cast<uint64_t>(result->schedule_id));
      event.set_message("schedule #" + std::to_string(result->schedule_id) + " regenerated for " + request.model());
    } else {
      ++failed;
      event.set_message("request #" + std::to_string((*requests)[i].first) + " (" + request.model() +
                        ") not regenerated: " + result.status().message());
    }
    Emit(std::move(event));
    Update(entry, [&](v1::Job& job) { job.set_progress(static_cast<double>(i + 1) / requests->size()); });
  }
  Update(entry, [&](v1::Job& job) {
    job.set_state(entry.stop ? v1::Job::STATE_CANCELLED : failed ? v1::Job::STATE_FAILED : v1::Job::STATE_SUCCEEDED);
    job.set_message(std::to_string(solved) + " schedules regenerated, " + std::to_string(failed) + " failed");
  });
}

}  // namespace edgecost::daemon
