#include "base/heartbeat.h"

#include <utility>

namespace edgecost {

Heartbeat::Heartbeat(double every_s, std::function<void(double elapsed_s)> tick)
    : start_(std::chrono::steady_clock::now()),
      thread_([this, every_s, tick = std::move(tick)] {
        const auto every = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
            std::chrono::duration<double>(every_s > 0 ? every_s : 1.0));
        auto next = start_ + every;
        std::unique_lock<std::mutex> lock(mutex_);
        while (!wake_.wait_until(lock, next, [this] { return stop_; })) {
          lock.unlock();
          tick(ElapsedS());
          lock.lock();
          next += every;
        }
      }) {}

Heartbeat::~Heartbeat() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

double Heartbeat::ElapsedS() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

}  // namespace edgecost
