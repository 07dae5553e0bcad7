// A CounterSource with scripted counts, for tests: each Read() returns what
// `script` gives for that window (its number, from 0), as one thread group per
// event with the enabled and running times the script chooses (running below
// enabled: a multiplexed counter; running 0: one the PMU never scheduled).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "probes/counter_source.h"

namespace edgecost::testing {

class FakeCounterSource : public probes::CounterSource {
 public:
  using Script = std::function<std::vector<probes::CounterReading>(int window)>;
  FakeCounterSource(std::vector<std::string> events, Script script, std::vector<probes::UncountedEvent> uncounted = {})
      : events_(std::move(events)), script_(std::move(script)), uncounted_(std::move(uncounted)) {}

  std::vector<std::string> Events() const override { return events_; }
  const std::vector<probes::UncountedEvent>& Uncounted() const override { return uncounted_; }
  Status Start() override {
    ++starts_;
    if (on_start) on_start();
    return Status::Ok();
  }
  Result<std::vector<probes::CounterReading>> Read() override {
    if (starts_ == 0) return FailedPrecondition("Read() before Start()");
    return script_(windows_++);
  }
  int windows() const { return windows_; }
  std::function<void()> on_start;  // called by every Start()

 private:
  std::vector<std::string> events_;
  Script script_;
  std::vector<probes::UncountedEvent> uncounted_;
  int starts_ = 0;
  int windows_ = 0;
};

}  // namespace edgecost::testing
