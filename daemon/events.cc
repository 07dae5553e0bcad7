#include "daemon/events.h"

#include <algorithm>
#include <chrono>

#include <boost/asio/post.hpp>

namespace edgecost::daemon {
namespace {

constexpr size_t kMaxEvents = 10000;  // older events are dropped; sequences keep counting
constexpr double kMaxWatchS = 60;

}  // namespace

EventLog::EventLog() : timers_work_(timers_.get_executor()), timer_thread_([this] { timers_.run(); }) {}

EventLog::~EventLog() {
  Shutdown();
  timers_work_.reset();  // every watcher was answered and its timer cancelled: the timer thread runs out
  timer_thread_.join();
}

void EventLog::Shutdown() {
  std::map<uint64_t, Watcher> watchers;
  {
    std::lock_guard lock(mutex_);
    shutting_down_ = true;
    watchers.swap(watchers_);
  }
  for (auto& [id, watcher] : watchers) Answer(watcher, {});
}

std::vector<v1::Event> EventLog::EventsAfterLocked(uint64_t after_sequence, uint64_t job_id) const {
  std::vector<v1::Event> out;
  for (const v1::Event& e : events_) {
    if (e.sequence() > after_sequence && (job_id == 0 || (e.has_job() && e.job().id() == job_id))) out.push_back(e);
  }
  return out;
}

void EventLog::Emit(v1::Event event) {
  std::vector<std::pair<Watcher, std::vector<v1::Event>>> ready;
  {
    std::lock_guard lock(mutex_);
    event.set_sequence(++last_sequence_);
    events_.push_back(std::move(event));
    if (events_.size() > kMaxEvents) events_.erase(events_.begin(), events_.begin() + kMaxEvents / 10);
    // Every watcher waits for anything newer than what it had (of its job, when it follows one).
    for (auto it = watchers_.begin(); it != watchers_.end();) {
      std::vector<v1::Event> events = EventsAfterLocked(it->second.after_sequence, it->second.job_id);
      if (events.empty()) {
        ++it;
        continue;
      }
      ready.emplace_back(std::move(it->second), std::move(events));
      it = watchers_.erase(it);
    }
  }
  for (auto& [watcher, events] : ready) Answer(watcher, std::move(events));
}

// The timer is cancelled and released on the timer thread, the only one that touches it.
void EventLog::Answer(Watcher& watcher, std::vector<v1::Event> events) {
  boost::asio::post(timers_, [timer = std::move(watcher.timer)] { timer->cancel(); });
  watcher.done(std::move(events));
}

void EventLog::Watch(uint64_t after_sequence, double wait_s, EventsCallback done, uint64_t job_id) {
  std::unique_lock lock(mutex_);
  if (after_sequence > last_sequence_) after_sequence = 0;  // asked of an earlier run of the daemon
  std::vector<v1::Event> events = EventsAfterLocked(after_sequence, job_id);
  if (!events.empty() || shutting_down_ || !(wait_s > 0)) {  // NaN too: answer now
    lock.unlock();
    return done(std::move(events));
  }
  const uint64_t id = next_watcher_++;
  auto timer = std::make_shared<boost::asio::steady_timer>(
      timers_, std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                   std::chrono::duration<double>(std::min(wait_s, kMaxWatchS))));
  timer->async_wait([this, id](const boost::system::error_code&) { FinishWatch(id); });
  watchers_.emplace(id, Watcher{after_sequence, job_id, std::move(done), std::move(timer)});
}

size_t EventLog::WatcherCount() {
  std::lock_guard lock(mutex_);
  return watchers_.size();
}

void EventLog::FinishWatch(uint64_t watcher_id) {
  std::unique_lock lock(mutex_);
  auto it = watchers_.find(watcher_id);
  if (it == watchers_.end()) return;  // answered by an event already
  Watcher watcher = std::move(it->second);
  watchers_.erase(it);
  lock.unlock();
  Answer(watcher, {});
}

}  // namespace edgecost::daemon
