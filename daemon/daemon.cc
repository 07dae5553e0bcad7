#include "daemon/daemon.h"

#include <chrono>
#include <cmath>
#include <sstream>

#include <boost/asio/post.hpp>
#include <spdlog/spdlog.h>

#include "costdb/costdb.h"
#include "costdb/postgres.h"
#include "daemon/log.h"
#include "profiler/profile.h"
#include "service/profile_job.h"
#include "service/sync.h"

namespace edgecost::daemon {
namespace {

// Compares without an early exit, so the time taken says nothing about the token.
bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

DaemonConfig WithDefaultDb(DaemonConfig config) {
  if (config.db_path.empty()) config.db_path = costdb::DefaultDbPath();
  return config;
}

}  // namespace

Daemon::Daemon(DaemonConfig config)
    : config_(WithDefaultDb(std::move(config))),
      store_(config_.db_path, costdb::OpenMode::kReadWrite),
      jobs_(store_, config_.probes_config, events_, config_.finished_jobs_in_memory, config_.train_data_dirs,
            config_.edgecost_binary),
      cost_service_(store_, &cost_tables_),
      solver_service_(store_, events_, &stop_solves_),
      job_service_(jobs_, events_),
      trace_service_(store_),
      solve_pool_(static_cast<size_t>(std::max(1, config_.concurrent_solves))) {
  if (!config_.token_file.empty()) {
    if (Result<std::string> token = ReadToken(config_.token_file); token.ok()) token_ = *token;  // Start() says if not
  }
  if (Result<probes::ProbesConfig> probes = probes::LoadProbesConfig(config_.probes_config); probes.ok()) {
    probes_ = probes::DetectAll(*probes);
  }
  RegisterRoutes();
  web_view_ = std::make_unique<WebView>(WebViewSources{.store = &store_,
                                                       .costs = &cost_service_,
                                                       .solver = &solver_service_,
                                                       .jobs = &job_service_,
                                                       .traces = &trace_service_,
                                                       .readings =
                                                           [this] {
                                                             std::lock_guard lock(probes_mutex_);
                                                             return ReadProbes(probes_);
                                                           },
                                                       .probe_infos =
                                                           [this] {
                                                             std::lock_guard lock(probes_mutex_);
                                                             return probes_.infos;
                                                           }});
}

Daemon::~Daemon() {
  Stop();
  solve_pool_.join();
  if (watcher_.joinable()) watcher_.join();
  if (syncer_.joinable()) syncer_.join();
}

Status Daemon::PushToCentral() {
  EC_ASSIGN_OR_RETURN(costdb::CostDb * db, store_.Db());
  service::SyncOptions options{.progress = [this](const std::string& line) {
    spdlog::info("event=store_pushed central={} sent={}", Quoted(costdb::RedactUrl(config_.central_store)), Quoted(line));
  }};
  return service::PushToStore(*db, config_.central_store, options).status();
}

void Daemon::SyncLoop() {
  int failures = 0;
  double wait_s = 0;  // the first push at start: what was measured while the agent was down
  std::unique_lock lock(watcher_mutex_);
  while (!watcher_wake_.wait_for(lock, std::chrono::duration<double>(wait_s), [this] { return stopping_; })) {
    lock.unlock();
    const Status pushed = PushToCentral();
    if (pushed.ok()) {
      if (failures > 0) {
        spdlog::info("event=store_reachable central={} after_attempts={}", Quoted(costdb::RedactUrl(config_.central_store)), failures);
        v1::Event event;
        event.set_kind("store");
        event.set_message("the central store " + costdb::RedactUrl(config_.central_store) + " is reachable again; what was measured "
                          "meanwhile was sent");
        events_.Emit(std::move(event));
      }
      failures = 0;
      wait_s = config_.push_interval_s;
    } else {
      // Backoff: 1 s, 2 s, 4 s ... up to retry_max_s; the local database keeps everything meanwhile.
      wait_s = std::min(config_.retry_max_s, std::ldexp(1.0, std::min(failures, 30)));
      if (failures == 0) {
        v1::Event event;
        event.set_kind("store");
        event.set_message("cannot push to the central store: " + pushed.message() + "; retrying, nothing is lost");
        events_.Emit(std::move(event));
      }
      ++failures;
      spdlog::warn("event=store_unreachable central={} attempt={} retry_in_s={:.3g} message={}",
                   Quoted(costdb::RedactUrl(config_.central_store)), failures, wait_s, Quoted(pushed.message()));
    }
    lock.lock();
  }
}

Status Daemon::CheckHardware(const std::string& why) {
  EC_ASSIGN_OR_RETURN(costdb::CostDb * opened, store_.Db());
  costdb::CostDb& db = *opened;
  const v1::Device device = service::ThisDevice(service::DefaultPagingDir(config_.db_path));
  Result<v1::Device> stored = db.GetDevice(device.name());
  const std::string before = stored.ok() ? stored->fingerprint().hash() : "";
  if (before == device.fingerprint().hash()) return Status::Ok();
  EC_RETURN_IF_ERROR(db.UpsertDevice(device).status());
  v1::Event event;
  event.set_kind("fingerprint");
  spdlog::info("event=fingerprint device={} before={} after={} why={}", Quoted(device.name()),
               before.empty() ? "none" : before, device.fingerprint().hash(), why);
  if (before.empty()) {
    event.set_message("fingerprint " + device.fingerprint().hash() + " recorded for " + device.name() + " (" + why +
                      ")");
    events_.Emit(event);
    return Status::Ok();
  }
  event.set_message("hardware of " + device.name() + " changed (" + why + "): fingerprint " + before + " -> " +
                    device.fingerprint().hash() + "; old costs and schedules are kept");
  events_.Emit(event);
  if (config_.reprofile_on_change) {  // the models measured on the old hardware, measured again on the new
    EC_ASSIGN_OR_RETURN(std::vector<std::string> models, db.ListModelsWithCosts(before, profiler::kMeasuredSource));
    for (const std::string& model : models) {
      v1::StartProfileRequest profile;
      profile.set_model(model);
      if (Result<v1::Job> job = jobs_.StartProfile(profile); !job.ok()) {  // e.g. an ONNX model: its file is the CLI's
        v1::Event skipped;
        skipped.set_kind("fingerprint");
        skipped.set_message(model + " is not profiled again: " + job.status().message());
        events_.Emit(std::move(skipped));
      }
    }
  }
  EC_ASSIGN_OR_RETURN(auto requests, db.ListScheduleRequests());
  if (!requests.empty()) EC_RETURN_IF_ERROR(jobs_.StartRegeneration("hardware changed").status());
  return Status::Ok();
}

void Daemon::RegisterRoutes() {
  auto bind = [](auto* service, auto method) {
    return [service, method](const auto& request) { return (service->*method)(request); };
  };
  router_.Add<v1::ListDevicesRequest, v1::ListDevicesResponse>("CostService", "ListDevices",
                                                               bind(&cost_service_, &CostService::ListDevices));
  router_.Add<v1::GetDeviceRequest, v1::Device>("CostService", "GetDevice",
                                                bind(&cost_service_, &CostService::GetDevice));
  router_.Add<v1::ListModelsRequest, v1::ListModelsResponse>("CostService", "ListModels",
                                                             bind(&cost_service_, &CostService::ListModels));
  router_.Add<v1::GetCostTableRequest, v1::CostTable>("CostService", "GetCostTable",
                                                      bind(&cost_service_, &CostService::GetCostTable));
  router_.Add<v1::GetPagingCostsRequest, v1::PagingCost>("CostService", "GetPagingCosts",
                                                         bind(&cost_service_, &CostService::GetPagingCosts));
  // An import takes up to its isolation's limits: on the pool of long requests, never on a query
  // worker, so that queries (/healthz included) are answered meanwhile.
  router_.AddAsync<v1::AddModelRequest, v1::AddModelResponse>(
      "CostService", "AddModel",
      [this](const v1::AddModelRequest& request, TwirpRouter::Done<v1::AddModelResponse> done) {
        boost::asio::post(solve_pool_, [this, request, done = std::move(done)] {
          done(Guarded([&] { return cost_service_.AddModel(request); }));
        });
      },
      /*mutates=*/true);
  router_.Add<v1::RemoveModelRequest, v1::RemoveModelResponse>("CostService", "RemoveModel",
                                                               bind(&cost_service_, &CostService::RemoveModel),
                                                               /*mutates=*/true);

  router_.AddAsync<v1::ScheduleRequest, v1::Schedule>(
      "SolverService", "Solve",
      [this](const v1::ScheduleRequest& request, TwirpRouter::Done<v1::Schedule> done) {
        if (stop_solves_) return done(Unavailable("the daemon is shutting down"));
        const int limit = 5 * config_.concurrent_solves;  // running, and four times as many waiting
        if (solves_in_flight_.fetch_add(1) >= limit) {
          solves_in_flight_.fetch_sub(1);
          return done(ResourceExhausted(std::to_string(limit) + " solves are running or waiting; try again later"));
        }
        boost::asio::post(solve_pool_, [this, request, done = std::move(done)] {
          done(Guarded([&] { return solver_service_.Solve(request); }));
          solves_in_flight_.fetch_sub(1);
        });
      },
      /*mutates=*/true);
  router_.Add<v1::GetScheduleRequest, v1::Schedule>("SolverService", "GetSchedule",
                                                    bind(&solver_service_, &SolverService::GetSchedule));
  router_.Add<v1::ListSchedulesRequest, v1::ListSchedulesResponse>(
      "SolverService", "ListSchedules", bind(&solver_service_, &SolverService::ListSchedules));

  router_.Add<v1::StartProfileRequest, v1::Job>("JobService", "StartProfile",
                                                bind(&job_service_, &JobService::StartProfile),
                                                /*mutates=*/true);
  router_.Add<v1::StartTrainRequest, v1::Job>("JobService", "StartTrain", bind(&job_service_, &JobService::StartTrain),
                                              /*mutates=*/true);
  router_.Add<v1::GetJobRequest, v1::Job>("JobService", "GetJob", bind(&job_service_, &JobService::GetJob));
  router_.Add<v1::CancelJobRequest, v1::Job>("JobService", "CancelJob", bind(&job_service_, &JobService::CancelJob),
                                             /*mutates=*/true);
  router_.Add<v1::ListJobsRequest, v1::ListJobsResponse>("JobService", "ListJobs",
                                                         bind(&job_service_, &JobService::ListJobs));
  router_.Add<v1::GetTraceRequest, v1::Trace>("TraceService", "GetTrace",
                                              bind(&trace_service_, &TraceService::GetTrace));
  router_.Add<v1::ListRunsRequest, v1::ListRunsResponse>("TraceService", "ListRuns",
                                                         bind(&trace_service_, &TraceService::ListRuns));
  router_.Add<v1::ListTrainRunsRequest, v1::ListTrainRunsResponse>(
      "TraceService", "ListTrainRuns", bind(&trace_service_, &TraceService::ListTrainRuns));
  router_.AddAsync<v1::WatchEventsRequest, v1::WatchEventsResponse>(
      "JobService", "WatchEvents",
      [this](const v1::WatchEventsRequest& request, TwirpRouter::Done<v1::WatchEventsResponse> done) {
        job_service_.WatchEvents(
            request, [done = std::move(done)](v1::WatchEventsResponse response) { done(std::move(response)); });
      });
}

HttpResponse Daemon::Login(const HttpRequest& request) {
  if (token_.empty()) return WebView::LoginPage(403, "this agent has no token; the page is served on its Unix socket");
  if (!ConstantTimeEquals(FormValue(request.body, "token"), token_)) {
    HttpResponse refused = WebView::LoginPage(401, "That is not this agent's token.");
    refused.close_connection = true;
    return refused;
  }
  // A session cookie: it lasts until the browser closes, and scripts cannot read it.
  HttpResponse response{303, "text/plain; charset=utf-8", "see /\n"};
  response.headers = {{"Set-Cookie", std::string(WebSessions::kCookie) + "=" + web_sessions_.Create() +
                                         "; Path=/; HttpOnly; SameSite=Strict"},
                      {"Location", "/"}};
  return response;
}

bool Daemon::HasCredential(const HttpRequest& request) {
  return (!token_.empty() && ConstantTimeEquals(request.authorization, "Bearer " + token_)) ||
         (!request.cookie.empty() && web_sessions_.Valid(request.cookie));
}

void Daemon::Handle(HttpRequest request, HttpReply reply) {
  if (request.target == "/healthz") return reply({200, "text/plain", "ok\n"});
  if (WebView::IsAsset(request)) return reply(WebView::Asset(request));  // static files: no data in them
  if (request.method == "POST" && request.target == "/login") return reply(Login(request));
  const bool has_token = HasCredential(request);
  if (request.over_tcp && !has_token && WebView::Serves(request)) {
    HttpResponse refused = WebView::LoginPage(401, "");
    refused.close_connection = true;
    request_metrics_.Record("web", refused.status, 0);
    return reply(std::move(refused));
  }
  if (request.over_tcp && !has_token) {
    // The connection closes too, so unauthenticated callers hold no connection between attempts.
    HttpResponse refused = TwirpError("unauthenticated", 401, "TCP callers need 'Authorization: Bearer <token>'");
    refused.close_connection = true;
    request_metrics_.Record(router_.Has(request.target) ? request.target : "unknown", refused.status, 0);
    return reply(std::move(refused));
  }
  if (request.target == "/metrics") return reply({200, "text/plain; version=0.0.4", MetricsText()});
  if (WebView::Serves(request)) {
    const auto start = std::chrono::steady_clock::now();
    HttpResponse page = web_view_->Get(request);
    request_metrics_.Record("web", page.status,
                            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    return reply(std::move(page));
  }

  const auto start = std::chrono::steady_clock::now();
  HttpReply measured = [this, target = request.target, start, reply = std::move(reply)](HttpResponse response) {
    const double elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    request_metrics_.Record(router_.Has(target) ? target : "unknown", response.status, elapsed_s);
    if (response.status >= 500 && response.status != 503) {
      spdlog::error("event=request_failed route={} status={} body={}", Quoted(target), response.status,
                    Quoted(response.body));
    }
    spdlog::debug("event=request route={} status={} latency_ms={:.3f}", target, response.status, elapsed_s * 1e3);
    reply(std::move(response));
  };
  if (config_.restrict_mutations && router_.Mutates(request.target) && !has_token) {
    return measured(TwirpError("permission_denied", 403, "this call changes state and is restricted to token holders"));
  }
  // Cost tables are answered from the cache of their encoded responses: analytic ones whatever the
  // database holds, the others while the database's costs version is the one they were read at.
  const std::string key = CostTableCache::Key(request);
  if (key.empty()) return router_.Handle(request, std::move(measured));
  if (std::optional<HttpResponse> cached = cost_tables_.Find(key)) return measured(std::move(*cached));
  // Read before the table is built, so that a table built after a write is kept under the older version.
  const Result<int64_t> version = cost_service_.CostsVersion();
  if (version.ok()) {
    if (std::optional<HttpResponse> cached = cost_tables_.Find(key, *version)) return measured(std::move(*cached));
  }
  router_.Handle(request, [this, key, version, measured = std::move(measured)](HttpResponse response) {
    if (version.ok()) {
      cost_tables_.Offer(key, response, *version);
    } else {
      cost_tables_.Offer(key, response);  // analytic only
    }
    measured(std::move(response));
  });
}

std::string Daemon::MetricsText() {
  std::ostringstream out;
  WriteGauges(out, {.jobs_by_state = jobs_.CountByState(),
                    .solves_in_flight = solves_in_flight_.load(),
                    .event_watchers = events_.WatcherCount()});
  {
    std::lock_guard lock(probes_mutex_);
    WriteProbeMetrics(out, probes_);
  }
  request_metrics_.Write(out);
  return out.str();
}

Result<int> Daemon::Start() {
  EC_RETURN_IF_ERROR(ValidateConfig(config_));
  EC_ASSIGN_OR_RETURN(DbLock lock, DbLock::Acquire(config_.db_path));
  db_lock_.emplace(std::move(lock));
  // Checked here, once, so that a bad file fails the start, not the first request.
  EC_RETURN_IF_ERROR(store_.Check());
  EC_RETURN_IF_ERROR(jobs_.Open());
  server_ =
      std::make_unique<HttpServer>([this](HttpRequest r, HttpReply reply) { Handle(std::move(r), std::move(reply)); },
                                   config_.limits, [this](const HttpRequest& r) { return HasCredential(r); });
  if (!config_.socket_path.empty()) {
    EC_RETURN_IF_ERROR(server_->ListenUnix(config_.socket_path, config_.socket_mode, config_.socket_group));
  }
  int port = 0;
  if (config_.tcp_port >= 0) {
    EC_ASSIGN_OR_RETURN(port, server_->ListenTcp(config_.tcp_host, config_.tcp_port));
  }
  EC_RETURN_IF_ERROR(CheckHardware("start"));
  if (config_.fingerprint_check_s > 0) {
    watcher_ = std::thread([this] {
      std::unique_lock lock(watcher_mutex_);
      while (!watcher_wake_.wait_for(lock, std::chrono::duration<double>(config_.fingerprint_check_s),
                                     [this] { return stopping_; })) {
        lock.unlock();
        if (Status s = CheckHardware("periodic"); !s.ok()) {  // retried at the next period
          spdlog::warn("event=fingerprint_check_failed message={}", Quoted(s.message()));
        }
        lock.lock();
      }
    });
  }
  if (!config_.central_store.empty()) syncer_ = std::thread([this] { SyncLoop(); });
  return port;
}

void Daemon::CheckSocket(const std::string& why) {
  if (!server_ || config_.socket_path.empty()) return;
  Result<HttpServer::SocketCheck> checked = server_->CheckUnixSocket();
  if (!checked.ok()) {
    spdlog::error("event=socket_lost path={} why={} message={}", Quoted(config_.socket_path), why,
                  Quoted(checked.status().message() + "; this daemon is unreachable on its socket until it is "
                                                      "restarted, or the path is freed and it gets SIGHUP"));
  } else if (*checked == HttpServer::SocketCheck::kRecreated) {
    spdlog::warn("event=socket_recreated path={} why={}", Quoted(config_.socket_path), why);
  }
}

void Daemon::Run() {
  if (server_) server_->Run();
}

void Daemon::Stop() {
  {
    std::lock_guard lock(watcher_mutex_);
    stopping_ = true;
  }
  watcher_wake_.notify_all();
  stop_solves_ = true;  // a running solve answers with its best schedule so far
  jobs_.Shutdown();     // the running profile stops at its next op; measured ops are stored
  events_.Shutdown();   // every long poll is answered
  solve_pool_.join();
  if (server_) server_->Stop();
}

}  // namespace edgecost::daemon
