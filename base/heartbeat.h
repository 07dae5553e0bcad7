// A tick every few seconds on a thread of its own, for progress lines of long
// work that reports nothing by itself for a while (a root LP, a benchmark's
// instance): the caller formats the line, with whatever it knows so far.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace edgecost {

class Heartbeat {
 public:
  // `tick(elapsed_s)` runs every `every_s` seconds from construction, on the
  // heartbeat's thread, until the destructor; never after it returns.
  Heartbeat(double every_s, std::function<void(double elapsed_s)> tick);
  ~Heartbeat();
  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;

  double ElapsedS() const;

 private:
  const std::chrono::steady_clock::time_point start_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace edgecost
