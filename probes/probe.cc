#include "probes/probe.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace edgecost::probes {

namespace {

// Power at time t, linear between samples, held constant outside them.
double PowerAt(const std::vector<PowerSample>& trace, size_t after, double t_s) {
  if (after == 0) return trace.front().watts;
  if (after >= trace.size()) return trace.back().watts;
  const PowerSample& a = trace[after - 1];
  const PowerSample& b = trace[after];
  if (b.t_s <= a.t_s) return b.watts;
  return a.watts + (b.watts - a.watts) * (t_s - a.t_s) / (b.t_s - a.t_s);
}

}  // namespace

bool TopLevelDomain(const ProbeInfo& info, size_t d) { return d >= info.inside.size() || info.inside[d].empty(); }

double IntegratePowerJ(const std::vector<PowerSample>& trace, double t0_s, double t1_s) {
  if (trace.empty() || t1_s <= t0_s) return 0;
  // The points of the piecewise-linear power curve inside [t0, t1], edges included.
  const auto by_time = [](const PowerSample& s, double t) { return s.t_s < t; };
  size_t first = static_cast<size_t>(std::lower_bound(trace.begin(), trace.end(), t0_s, by_time) - trace.begin());
  double energy_j = 0;
  double t = t0_s;
  double w = PowerAt(trace, first, t0_s);
  for (size_t i = first; i < trace.size() && trace[i].t_s < t1_s; ++i) {
    energy_j += 0.5 * (w + trace[i].watts) * (trace[i].t_s - t);
    t = trace[i].t_s;
    w = trace[i].watts;
  }
  const size_t last = static_cast<size_t>(std::lower_bound(trace.begin(), trace.end(), t1_s, by_time) - trace.begin());
  energy_j += 0.5 * (w + PowerAt(trace, last, t1_s)) * (t1_s - t);
  return energy_j;
}

EnergyMonitor::EnergyMonitor(std::unique_ptr<Probe> probe, double sample_interval_s, MonotonicClock clock)
    : probe_(std::move(probe)),
      interval_s_(sample_interval_s > 0 ? sample_interval_s : std::max(1e-3, probe_->info().update_interval_s)),
      clock_(std::move(clock)) {}

EnergyMonitor::~EnergyMonitor() { Stop(); }

Status EnergyMonitor::Start() {
  Stop();
  started_ = true;
  start_s_ = clock_();
  stop_s_ = -1;
  sampler_status_ = Status::Ok();
  EC_ASSIGN_OR_RETURN(std::vector<double> first, probe_->Read());
  if (probe_->info().kind == ReadingKind::kEnergyCounter) {
    last_raw_ = first;
    total_j_.assign(first.size(), 0.0);
    return Status::Ok();
  }
  {
    std::lock_guard lock(mutex_);
    traces_.assign(first.size(), {});
    for (size_t d = 0; d < first.size(); ++d) traces_[d].push_back({start_s_, first[d]});
  }
  running_ = true;
  sampler_ = std::thread([this] { SampleLoop(); });
  return Status::Ok();
}

void EnergyMonitor::Stop() {
  if (sampler_.joinable()) {
    running_ = false;
    sampler_.join();
  }
  if (!started_ || stop_s_ >= 0) return;
  if (probe_->info().kind == ReadingKind::kEnergyCounter) (void)ReadCounters();  // close the window
  stop_s_ = clock_();
}

void EnergyMonitor::SampleLoop() {
  using std::chrono::duration;
  auto next = std::chrono::steady_clock::now();
  while (running_) {
    next += std::chrono::duration_cast<std::chrono::steady_clock::duration>(duration<double>(interval_s_));
    std::this_thread::sleep_until(next);
    Result<std::vector<double>> watts = probe_->Read();
    const double now = clock_();
    std::lock_guard lock(mutex_);
    if (!watts.ok()) {
      sampler_status_ = watts.status();
      return;
    }
    for (size_t d = 0; d < traces_.size() && d < watts->size(); ++d) traces_[d].push_back({now, (*watts)[d]});
  }
}

Result<std::vector<double>> EnergyMonitor::ReadCounters() {
  EC_ASSIGN_OR_RETURN(std::vector<double> raw, probe_->Read());
  for (size_t d = 0; d < raw.size() && d < last_raw_.size(); ++d) {
    double delta = raw[d] - last_raw_[d];
    // A counter that went down wrapped once (reads are far more frequent than wraps).
    if (delta < 0 && probe_->WrapJ(d) > 0) delta += probe_->WrapJ(d);
    if (delta > 0) total_j_[d] += delta;
    last_raw_[d] = raw[d];
  }
  return total_j_;
}

Result<std::vector<double>> EnergyMonitor::EnergyJ() {
  if (!started_) return FailedPrecondition("the energy monitor was not started");
  if (probe_->info().kind == ReadingKind::kEnergyCounter) {
    if (stop_s_ >= 0) {
      last_read_s_ = stop_s_;
      return total_j_;
    }
    last_read_s_ = clock_();  // a counter read right after: the closest stamp it has
    return ReadCounters();
  }
  std::lock_guard lock(mutex_);
  if (!sampler_status_.ok()) return sampler_status_;
  const double end = stop_s_ >= 0 ? stop_s_ : clock_();
  last_read_s_ = end;
  std::vector<double> energy;
  for (const auto& trace : traces_) energy.push_back(IntegratePowerJ(trace, start_s_, end));
  return energy;
}

double EnergyMonitor::UpdatesSinceStart() const {
  const double end = stop_s_ >= 0 ? stop_s_ : clock_();
  const double interval = std::max(1e-9, probe_->info().update_interval_s);
  return (end - start_s_) / interval;
}

Status EnergyMonitor::SamplerStatus() const {
  std::lock_guard lock(mutex_);
  return sampler_status_;
}

}  // namespace edgecost::probes
