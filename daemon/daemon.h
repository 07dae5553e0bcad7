// The edgecost agent: one per device, serving cost tables, schedules and jobs
// over Twirp, with /metrics (Prometheus text) and /healthz, and watching the
// hardware for changes that make its costs stale.
#pragma once

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <boost/asio/thread_pool.hpp>

#include "base/status.h"
#include "daemon/config.h"
#include "daemon/cost_table_cache.h"
#include "daemon/db_lock.h"
#include "daemon/events.h"
#include "daemon/http_server.h"
#include "daemon/jobs.h"
#include "daemon/metrics.h"
#include "daemon/services.h"
#include "daemon/twirp.h"
#include "daemon/web_view.h"
#include "probes/registry.h"

namespace edgecost::daemon {

class Daemon {
 public:
  explicit Daemon(DaemonConfig config);
  ~Daemon();

  // Takes the database, binds the listeners; returns the TCP port actually bound, or 0.
  Result<int> Start();
  // Serves until Stop() (e.g. from a SIGTERM handler).
  void Run();
  void Stop();

  // Reads this device's fingerprint; when it differs from the stored one, records
  // it, queues re-profiles (if configured) and the regeneration of every stored
  // schedule request, and emits a "fingerprint" event. `why`: "start", "SIGHUP", "periodic".
  Status CheckHardware(const std::string& why);

  // Sends what this agent measured and the central store ([store] central) has not
  // acknowledged; logs what it sent. Unavailable while the store is unreachable.
  Status PushToCentral();

  // Binds the Unix socket again if its file has vanished (on SIGHUP); logs one
  // line saying what it did, or why it could not.
  void CheckSocket(const std::string& why);

  // The full request path: auth, metrics, the cost-table cache, Twirp dispatch;
  // `reply` gets the answer, perhaps later and from another thread. Public so
  // tests and fuzzers can call it without sockets.
  void Handle(HttpRequest request, HttpReply reply);

 private:
  void RegisterRoutes();
  // The bearer token or a web session: what TCP callers need (headers only are read).
  bool HasCredential(const HttpRequest& request);
  std::string MetricsText();
  HttpResponse Login(const HttpRequest& request);

  DaemonConfig config_;
  std::string token_;
  std::optional<DbLock> db_lock_;  // held from Start() on: one daemon per database
  costdb::Store store_;  // opened for every page, call and job; checked by Start()
  EventLog events_;
  JobManager jobs_;
  CostTableCache cost_tables_;
  std::atomic<bool> stop_solves_{false};
  CostService cost_service_;
  SolverService solver_service_;
  JobService job_service_;
  TraceService trace_service_;
  TwirpRouter router_;
  WebSessions web_sessions_;
  std::unique_ptr<WebView> web_view_;
  // Solves run here, not on the HTTP workers, so that queries stay answered while they search.
  boost::asio::thread_pool solve_pool_;
  std::atomic<int> solves_in_flight_{0};  // running and waiting
  RequestMetrics request_metrics_;
  std::mutex probes_mutex_;
  probes::Detected probes_;  // read at each scrape of /metrics
  std::unique_ptr<HttpServer> server_;
  std::thread watcher_;
  std::thread syncer_;  // pushes to the central store: every push_interval_s, with backoff while it fails
  void SyncLoop();
  std::mutex watcher_mutex_;
  std::condition_variable watcher_wake_;
  bool stopping_ = false;
};

}  // namespace edgecost::daemon
