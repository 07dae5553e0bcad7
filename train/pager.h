// Paging for the executor: activations written to files in the paging directory
// and read back, on an I/O thread of its own, the way the paging benchmark
// measures storage (write + fsync out; O_DIRECT in, else the cached pages
// dropped first). Requests run in the order given, so a read always follows the
// write it needs. A page-in of the current stage may start early, as soon as
// the arena has room the compute thread will not need (its reserve); one of an
// earlier stage is resident in the plan already and is read at once.
//
// Files are named edgecost-train-<pid>-<node>.page; the pager removes its own
// when it stops, and at start removes those of processes that no longer run
// (a killed run's), so paging files never pile up.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/status.h"
#include "train/arena.h"

namespace edgecost::train {

struct PagerStats {
  uint64_t paged_out_bytes = 0, paged_in_bytes = 0;
  uint32_t page_outs = 0, page_ins = 0;
  double page_out_s = 0, page_in_s = 0;  // the I/O thread's time writing and reading
};

// One I/O operation as it ran, for traces: seconds on the executor's clock.
struct IoEvent {
  int node = 0;
  bool page_out = false;
  double start_s = 0, duration_s = 0;
};

class Pager {
 public:
  // Creates `dir` if needed and removes files left by dead processes; `origin_s`
  // is the executor's clock origin (steady clock seconds) for IoEvents.
  static Result<std::unique_ptr<Pager>> Start(const std::string& dir, Arena& arena, double origin_s);
  ~Pager();
  Pager(const Pager&) = delete;
  Pager& operator=(const Pager&) = delete;

  // The stage the compute thread is in, and the most memory the rest of it will hold.
  void SetStage(int stage, uint64_t reserve_bytes);
  void SetReserve(uint64_t reserve_bytes);

  void PageOut(int node, int stage);
  void PageIn(int node, int stage, uint64_t bytes);
  // Waits until `node` has no read pending (reads only) or nothing pending; the
  // time waited is the paging time on the critical path. A failed I/O is returned.
  Status WaitRead(int node, double* waited_s);
  Status WaitAll(int node, double* waited_s);
  // Waits for every request; the stats are then complete.
  Status Drain(double* waited_s);

  bool Healthy();  // no I/O has failed
  PagerStats TakeStats();
  std::vector<IoEvent> TakeEvents();
  const std::string& dir() const { return dir_; }
  std::string PathFor(int node) const;

  // Removes edgecost-train-<pid>-*.page files in `dir` whose process is gone; returns how many.
  // `own_too`: this process runs no pager (a daemon starting), so files under its own pid are a
  // killed run's whose pid it was given again (a container's daemon is always pid 1).
  static int RemoveStaleFiles(const std::string& dir, bool own_too = false);

 private:
  struct Request {
    bool page_out = false;
    int node = 0;
    int stage = 0;
    uint64_t bytes = 0;
  };

  Pager(std::string dir, Arena& arena, double origin_s);
  void Loop();
  Status Run(Request& request);
  bool Runnable(const Request& request) const;  // under mutex_
  void Grow(int node);                          // under mutex_
  Status Wait(int node, bool reads_only, double* waited_s);

  const std::string dir_;
  Arena& arena_;
  const double origin_s_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Request> queue_;
  std::vector<int> pending_in_, pending_out_;  // per node
  std::vector<char> urgent_;                   // the compute thread waits for this node's read
  std::vector<char> written_;                  // a file exists for this node
  int stage_ = 0;
  uint64_t reserve_ = 0;
  uint64_t early_bytes_ = 0;  // this stage's page-ins already read: room the plan does not count yet
  bool stop_ = false;
  Status error_;
  PagerStats stats_;
  std::vector<IoEvent> events_;
  std::thread thread_;
};

}  // namespace edgecost::train
