// The edgecost agent: one per device, serving cost tables, schedules and jobs
// over Twirp, with /metrics (Prometheus text) and /healthz.
#pragma once

#include <atomic>
#include <condition_variable>
#include <thread>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>

#include <boost/asio/thread_pool.hpp>

#include "base/status.h"
#include "daemon/db_lock.h"
#include "daemon/http_server.h"
#include "daemon/jobs.h"
#include "probes/sysfs.h"
#include "proto/edgecost.pb.h"
#include "daemon/twirp.h"

namespace edgecost::daemon {

// Half the cores, at least one: solves are CPU-bound, and queries and profiles need the rest.
int DefaultConcurrentSolves();

struct DaemonConfig {
  std::string db_path;                 // empty: the default cost database
  std::string socket_path;             // empty: no Unix socket
  unsigned socket_mode = 0660;
  std::string socket_group;            // empty: the daemon's own group
  std::string tcp_host = "127.0.0.1";  // loopback unless told otherwise
  int tcp_port = -1;                   // -1: no TCP; 0: any free port
  std::string token_file;              // required with TCP
  bool restrict_mutations = false;     // profile, solve, cancel only with the token, even on the socket
  std::string probes_config;            // the config file, for its [probes] section (meters, rails)
  double fingerprint_check_s = 300;    // how often to look for hardware changes; 0: only at start and on SIGHUP
  bool reprofile_on_change = true;     // on a hardware change, profile again the models measured on the old hardware
  int concurrent_solves = DefaultConcurrentSolves();  // Solve calls running at once; up to 4x as many wait
  ServerLimits limits;
};

// $XDG_RUNTIME_DIR/edgecost.sock, else /run/edgecost/edgecost.sock.
std::string DefaultSocketPath();

// Reads a TOML config file (keys as in DaemonConfig, grouped under [server] and
// [limits]) over `config`. Unknown keys are errors naming the key.
Status LoadConfigFile(const std::string& path, DaemonConfig& config);
// Checks a config for what would fail at start: TCP without a token, unreadable token file.
Status ValidateConfig(const DaemonConfig& config);

class Daemon {
 public:
  explicit Daemon(DaemonConfig config);
  ~Daemon();

  // Binds the listeners; returns the TCP port actually bound, or 0.
  Result<int> Start();
  // Serves until Stop() (e.g. from a SIGTERM handler).
  void Run();
  void Stop();

  // Reads this device's fingerprint; when it differs from the stored one, records
  // it, queues re-profiles (if configured) and the regeneration of every stored
  // schedule request, and emits a "fingerprint" event. `why`: "start", "SIGHUP", "periodic".
  Status CheckHardware(const std::string& why);

  // The full request path: auth, metrics, Twirp dispatch; `reply` gets the
  // answer, perhaps later and from another thread. Public so tests can call it without sockets.
  void Handle(HttpRequest request, HttpReply reply);

 private:
  void RegisterRoutes();
  std::string MetricsText();

  DaemonConfig config_;
  std::optional<DbLock> db_lock_;  // held from Start() on: one daemon per database
  std::string token_;
  TwirpRouter router_;
  std::unique_ptr<JobManager> jobs_;
  // Solves run here, not on the HTTP workers, so that queries stay answered while they search.
  boost::asio::thread_pool solve_pool_;
  std::atomic<int> solves_in_flight_{0};  // running and waiting
  std::atomic<bool> stop_solves_{false};
  std::unique_ptr<HttpServer> server_;
  std::thread watcher_;
  std::mutex watcher_mutex_;
  std::condition_variable watcher_wake_;
  bool stopping_ = false;

  struct RouteStats {
    uint64_t requests = 0;
    uint64_t errors = 0;
    std::vector<uint64_t> latency_buckets;  // cumulative counts per kLatencyBucketsS
    double latency_sum_s = 0;
  };
  void HandleCostTableCached(const HttpRequest& request, HttpReply reply);
  void Record(const std::string& target, int status, double elapsed_s);
  Result<v1::Schedule> SolveAndStore(const v1::ScheduleRequest& request);
  void JobAndProbeMetrics(std::ostream& out);
  std::mutex probes_mutex_;
  probes::Detected probes_;  // read at each scrape of /metrics
  std::mutex cost_table_cache_mutex_;
  std::set<std::string> analytic_requests_;                   // serialized GetCostTableRequests
  std::map<std::string, HttpResponse> cost_table_responses_;  // by encoding and request
  std::mutex stats_mutex_;
  std::map<std::string, RouteStats> stats_;
};

}  // namespace edgecost::daemon
