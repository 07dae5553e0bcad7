#include "base/heartbeat.h"

#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

namespace edgecost {
namespace {

TEST(Heartbeat, TicksWithTheElapsedTimeUntilDestroyed) {
  std::atomic<int> ticks{0};
  std::atomic<double> last_s{-1};
  {
    Heartbeat beat(0.01, [&](double elapsed_s) {
      EXPECT_GE(elapsed_s, last_s.load());  // elapsed time only grows
      last_s = elapsed_s;
      ++ticks;
    });
    while (ticks < 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // the test's timeout bounds it
    EXPECT_GE(beat.ElapsedS(), last_s.load());
  }
  const int after = ticks;
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(ticks, after);  // never after the destructor returned
}

TEST(Heartbeat, DestroyedBeforeItsFirstTickNeverTicks) {
  std::atomic<int> ticks{0};
  { Heartbeat beat(600, [&](double) { ++ticks; }); }
  EXPECT_EQ(ticks, 0);
}

}  // namespace
}  // namespace edgecost
