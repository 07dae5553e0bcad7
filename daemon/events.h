// The event log that WatchEvents long-polls: job changes, stored schedules
// and hardware changes, each with a sequence number. A waiting poll holds a
// timer, not a thread.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>

#include "proto/edgecost.pb.h"

namespace edgecost::daemon {

class EventLog {
 public:
  EventLog();
  ~EventLog();  // answers every watcher first
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  void Emit(v1::Event event);  // numbers it and answers every waiting watcher

  // Calls `done` once, from any thread, with the events after `after_sequence`:
  // at once if there are any, else at the next event, after `wait_s` (at most
  // a minute) or at shutdown. Sequences start again at 1 when the daemon does,
  // so an `after_sequence` beyond the last one gets every event kept.
  // A nonzero `job_id` follows one job: only its events count.
  using EventsCallback = std::function<void(std::vector<v1::Event>)>;
  void Watch(uint64_t after_sequence, double wait_s, EventsCallback done, uint64_t job_id = 0);
  size_t WatcherCount();  // long polls waiting for an event

  // Answers every watcher with what it has, and answers new ones at once.
  void Shutdown();

 private:
  struct Watcher {
    uint64_t after_sequence = 0;
    uint64_t job_id = 0;
    EventsCallback done;
    std::shared_ptr<boost::asio::steady_timer> timer;
  };
  std::vector<v1::Event> EventsAfterLocked(uint64_t after_sequence, uint64_t job_id) const;
  void FinishWatch(uint64_t watcher_id);  // its time is up
  void Answer(Watcher& watcher, std::vector<v1::Event> events);

  std::mutex mutex_;
  std::deque<v1::Event> events_;
  uint64_t last_sequence_ = 0;
  std::map<uint64_t, Watcher> watchers_;
  uint64_t next_watcher_ = 1;
  bool shutting_down_ = false;
  // Watchers' deadlines: timers on one thread of their own.
  boost::asio::io_context timers_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> timers_work_;
  std::thread timer_thread_;
};

}  // namespace edgecost::daemon
