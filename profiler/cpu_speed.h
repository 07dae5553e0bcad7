// How fast the CPUs run right now. A fixed kernel, small enough to stay in L1,
// is timed on every thread of an OpenMP team; held against its usual time on
// the device (profile.cc), it shows what no scheduler counter does: another
// guest on the host's core (many hypervisors report no steal time), a busy
// SMT sibling, or thermal throttling, slowing every op alike. On this project's VM the same kernel was seen to run
// 1.9x slower for seconds at a time, with steal time at 0.
#pragma once

namespace edgecost::profiler {

// Seconds the reference kernel takes on the slowest thread of a team of
// `threads`, on each thread's own CPU clock (the best of several repetitions on
// each thread, so that one interrupt does not count; time descheduled does not). About 70 us per call on this 2.1 GHz
// VM: two per window of at least 0.1 s, about 0.14% of the profile.
double CpuCheckS(int threads);

}  // namespace edgecost::profiler
