#include "daemon/daemon.h"

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <sstream>

#include <boost/asio/post.hpp>
#include <google/protobuf/util/json_util.h>
#include <spdlog/spdlog.h>
#include <toml++/toml.h>

#include "costdb/costdb.h"
#include "daemon/log.h"
#include "graph/resolve.h"
#include "probes/registry.h"
#include "profiler/cost_tables.h"
#include "profiler/profile.h"
#include "profiler/profile_job.h"

namespace edgecost::daemon {
namespace {


constexpr double kMaxSolveTimeS = 600;  // a solve over RPC holds a worker thread
constexpr size_t kMaxCachedTables = 256;
constexpr char kCostTableRoute[] = "/twirp/edgecost.v1.CostService/GetCostTable";

// A GetCostTable call's cache key: its encoding and its decoded request, so
// that equal requests spelled differently share an entry. Empty if it does not decode.
std::string CostTableCacheKey(const HttpRequest& request) {
  v1::GetCostTableRequest decoded;
  const bool json = IsJson(request.content_type);
  const bool ok = json ? google::protobuf::util::JsonStringToMessage(request.body, &decoded).ok()
                       : decoded.ParseFromString(request.body);
  return ok ? request.content_type + '\n' + decoded.SerializeAsString() : std::string();
}
constexpr double kLatencyBucketsS[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1, 5};

std::string Trim(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.pop_back();
  return text;
}

// Compares without an early exit, so the time taken says nothing about the token.
bool ConstantTimeEquals(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

// One database connection per worker thread: SQLite connections are not shared across threads.
Result<costdb::CostDb*> ThreadDb(const std::string& path) {
  thread_local std::map<std::string, costdb::CostDb> connections;
  auto it = connections.find(path);
  if (it == connections.end()) {
    EC_ASSIGN_OR_RETURN(costdb::CostDb db, costdb::CostDb::Open(path, costdb::OpenMode::kReadWrite));
    it = connections.emplace(path, std::move(db)).first;
  }
  return &it->second;
}

}  // namespace

int DefaultConcurrentSolves() { return std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / 2); }

std::string DefaultSocketPath() {
  const char* runtime = std::getenv("XDG_RUNTIME_DIR");
  return runtime && *runtime ? std::string(runtime) + "/edgecost.sock" : "/run/edgecost/edgecost.sock";
}

Status LoadConfigFile(const std::string& path, DaemonConfig& config) {
  toml::table table;
  try {
    table = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    std::ostringstream where;
    where << e.source().begin;
    return InvalidArgument(path + ":" + where.str() + ": " + std::string(e.description()));
  }
  for (const auto& [section, node] : table) {
    if (section == "probes") {  // read by probes::LoadProbesConfig
      config.probes_config = path;
      continue;
    }
    if (section != "server" && section != "limits" && section != "database") {
      return InvalidArgument(path + ": unknown section [" + std::string(section.str()) + "]");
    }
    const toml::table* entries = node.as_table();
    if (!entries) return InvalidArgument(path + ": '" + std::string(section.str()) + "' must be a section");
    for (const auto& [key_view, node_value] : *entries) {
      const toml::node& value = node_value;  // lambdas cannot capture structured bindings before clang 16
      const std::string key(key_view.str());
      const std::string name = std::string(section.str()) + "." + key;
      auto text = [&]() -> Result<std::string> {
        if (auto s = value.value<std::string>()) return *s;
        return InvalidArgument(path + ": " + name + " must be a string");
      };
      auto number = [&]() -> Result<double> {
        if (auto d = value.value<double>()) return *d;
        return InvalidArgument(path + ": " + name + " must be a number");
      };
      if (name == "database.path") {
        EC_ASSIGN_OR_RETURN(config.db_path, text());
      } else if (name == "server.socket") {
        EC_ASSIGN_OR_RETURN(config.socket_path, text());
      } else if (name == "server.socket_mode") {
        EC_ASSIGN_OR_RETURN(std::string mode, text());
        config.socket_mode = static_cast<unsigned>(std::strtoul(mode.c_str(), nullptr, 8));
      } else if (name == "server.socket_group") {
        EC_ASSIGN_OR_RETURN(config.socket_group, text());
      } else if (name == "server.tcp_host") {
        EC_ASSIGN_OR_RETURN(config.tcp_host, text());
      } else if (name == "server.tcp_port") {
        EC_ASSIGN_OR_RETURN(double port, number());
        config.tcp_port = static_cast<int>(port);
      } else if (name == "server.token_file") {
        EC_ASSIGN_OR_RETURN(config.token_file, text());
      } else if (name == "server.restrict_mutations") {
        if (auto b = value.value<bool>()) {
          config.restrict_mutations = *b;
        } else {
          return InvalidArgument(path + ": " + name + " must be true or false");
        }
      } else if (name == "server.fingerprint_check_s") {
        EC_ASSIGN_OR_RETURN(config.fingerprint_check_s, number());
      } else if (name == "server.reprofile_on_change") {
        if (auto b = value.value<bool>()) {
          config.reprofile_on_change = *b;
        } else {
          return InvalidArgument(path + ": " + name + " must be true or false");
        }
      } else if (name == "limits.max_body_bytes") {
        EC_ASSIGN_OR_RETURN(double v, number());
        config.limits.max_body_bytes = static_cast<size_t>(v);
      } else if (name == "limits.max_header_bytes") {
        EC_ASSIGN_OR_RETURN(double v, number());
        config.limits.max_header_bytes = static_cast<size_t>(v);
      } else if (name == "limits.read_timeout_s") {
        EC_ASSIGN_OR_RETURN(config.limits.read_timeout_s, number());
      } else if (name == "limits.write_timeout_s") {
        EC_ASSIGN_OR_RETURN(config.limits.write_timeout_s, number());
      } else if (name == "limits.max_connections") {
        EC_ASSIGN_OR_RETURN(double v, number());
        config.limits.max_connections = static_cast<int>(v);
      } else if (name == "limits.concurrent_solves") {
        EC_ASSIGN_OR_RETURN(double v, number());
        config.concurrent_solves = static_cast<int>(v);
      } else if (name == "limits.worker_threads") {
        EC_ASSIGN_OR_RETURN(double v, number());
        config.limits.worker_threads = static_cast<int>(v);
      } else {
        return InvalidArgument(path + ": unknown key " + name);
      }
    }
  }
  return Status::Ok();
}

Status ValidateConfig(const DaemonConfig& config) {
  if (config.socket_path.empty() && config.tcp_port < 0) {
    return InvalidArgument("nothing to listen on: give a Unix socket, a TCP port, or both");
  }
  if (config.tcp_port >= 0 || config.restrict_mutations) {
    if (config.token_file.empty()) {
      return InvalidArgument("TCP and restricted calls need a bearer token: set server.token_file (or --token-file)");
    }
    std::ifstream in(config.token_file);
    std::string token;
    std::getline(in, token);
    if (!in && token.empty()) return PermissionDenied("cannot read the token file " + config.token_file);
    if (Trim(token).size() < 16) return InvalidArgument("the token in " + config.token_file + " is shorter than 16 characters");
  }
  if (!config.probes_config.empty()) EC_RETURN_IF_ERROR(probes::LoadProbesConfig(config.probes_config).status());
  if (config.limits.max_connections < 1 || config.limits.worker_threads < 1 || config.concurrent_solves < 1) {
    return InvalidArgument("limits.max_connections, limits.worker_threads and limits.concurrent_solves must be at least 1");
  }
  return Status::Ok();
}

Daemon::Daemon(DaemonConfig config)
    : config_(std::move(config)), solve_pool_(static_cast<size_t>(std::max(1, config_.concurrent_solves))) {
  if (config_.db_path.empty()) config_.db_path = costdb::DefaultDbPath();
  if (!config_.token_file.empty()) {
    std::ifstream in(config_.token_file);
    std::getline(in, token_);
    token_ = Trim(token_);
  }
  jobs_ = std::make_unique<JobManager>(config_.db_path, config_.probes_config);
  if (Result<probes::ProbesConfig> probes = probes::LoadProbesConfig(config_.probes_config); probes.ok()) {
    probes_ = probes::DetectAll(*probes);
  }
  RegisterRoutes();
}

Daemon::~Daemon() {
  Stop();
  solve_pool_.join();
  if (watcher_.joinable()) watcher_.join();
}

Status Daemon::CheckHardware(const std::string& why) {
  EC_ASSIGN_OR_RETURN(costdb::CostDb db, costdb::CostDb::Open(config_.db_path, costdb::OpenMode::kReadWrite));
  const v1::Device device = profiler::ThisDevice(profiler::DefaultPagingDir(config_.db_path));
  Result<v1::Device> stored = db.GetDevice(device.name());
  const std::string before = stored.ok() ? stored->fingerprint().hash() : "";
  if (before == device.fingerprint().hash()) return Status::Ok();
  EC_RETURN_IF_ERROR(db.UpsertDevice(device).status());
  v1::Event event;
  event.set_kind("fingerprint");
  spdlog::info("event=fingerprint device={} before={} after={} why={}", Quoted(device.name()),
               before.empty() ? "none" : before, device.fingerprint().hash(), why);
  if (before.empty()) {
    event.set_message("fingerprint " + device.fingerprint().hash() + " recorded for " + device.name() + " (" + why + ")");
    jobs_->Emit(event);
    return Status::Ok();
  }
  event.set_message("hardware of " + device.name() + " changed (" + why + "): fingerprint " + before + " -> " +
                    device.fingerprint().hash() + "; old costs and schedules are kept");
  jobs_->Emit(event);
  if (config_.reprofile_on_change) {  // the models measured on the old hardware, measured again on the new
    EC_ASSIGN_OR_RETURN(std::vector<std::string> models, db.ListModelsWithCosts(before, profiler::kMeasuredSource));
    for (const std::string& model : models) {
      v1::StartProfileRequest profile;
      profile.set_model(model);
      if (Result<v1::Job> job = jobs_->StartProfile(profile); !job.ok()) {  // e.g. an ONNX model: its file is the CLI's
        v1::Event skipped;
        skipped.set_kind("fingerprint");
        skipped.set_message(model + " is not profiled again: " + job.status().message());
        jobs_->Emit(std::move(skipped));
      }
    }
  }
  EC_ASSIGN_OR_RETURN(auto requests, db.ListScheduleRequests());
  if (!requests.empty()) EC_RETURN_IF_ERROR(jobs_->StartRegeneration("hardware changed").status());
  return Status::Ok();
}

void Daemon::RegisterRoutes() {
  const std::string db = config_.db_path;
  router_.Add<v1::ListDevicesRequest, v1::ListDevicesResponse>(
      "CostService", "ListDevices", [db](const v1::ListDevicesRequest&, const CallContext&) -> Result<v1::ListDevicesResponse> {
        EC_ASSIGN_OR_RETURN(costdb::CostDb * cost_db, ThreadDb(db));
        EC_ASSIGN_OR_RETURN(std::vector<v1::Device> devices, cost_db->ListDevices());
        v1::ListDevicesResponse response;
        for (v1::Device& device : devices) *response.add_devices() = std::move(device);
        return response;
      });
  router_.Add<v1::GetDeviceRequest, v1::Device>(
      "CostService", "GetDevice", [db](const v1::GetDeviceRequest& request, const CallContext&) -> Result<v1::Device> {
        if (request.name().empty()) return InvalidArgument("name is required");
        EC_ASSIGN_OR_RETURN(costdb::CostDb * cost_db, ThreadDb(db));
        return cost_db->GetDevice(request.name());
      });
  router_.Add<v1::ListModelsRequest, v1::ListModelsResponse>(
      "CostService", "ListModels",
      [](const v1::ListModelsRequest&, const CallContext&) { return profiler::DescribeZoo(1); });
  router_.Add<v1::GetCostTableRequest, v1::CostTable>(
      "CostService", "GetCostTable",
      [db, this](const v1::GetCostTableRequest& request, const CallContext&) -> Result<v1::CostTable> {
        EC_RETURN_IF_ERROR(graph::CheckModelName(request.model()));
        EC_ASSIGN_OR_RETURN(costdb::CostDb * cost_db, ThreadDb(db));
        EC_ASSIGN_OR_RETURN(v1::CostTable table, profiler::ResolveCostTable(cost_db, request));
        if (table.cost_source() != profiler::kMeasuredSource) {
          std::lock_guard lock(cost_table_cache_mutex_);
          if (analytic_requests_.size() < kMaxCachedTables) analytic_requests_.insert(request.SerializeAsString());
        }
        return table;
      });
  router_.Add<v1::GetPagingCostsRequest, v1::PagingCost>(
      "CostService", "GetPagingCosts",
      [db](const v1::GetPagingCostsRequest& request, const CallContext&) -> Result<v1::PagingCost> {
        if (request.device().empty()) return InvalidArgument("device is required");
        EC_ASSIGN_OR_RETURN(costdb::CostDb * cost_db, ThreadDb(db));
        EC_ASSIGN_OR_RETURN(v1::Device device, cost_db->GetDevice(request.device()));
        EC_ASSIGN_OR_RETURN(std::optional<v1::PagingCost> paging, cost_db->GetPagingCost(device.fingerprint().hash()));
        if (!paging) return NotFound("no paging costs for " + request.device() + "; profile it first");
        return *paging;
      });
  JobManager* jobs = jobs_.get();
  router_.AddAsync<v1::ScheduleRequest, v1::Schedule>(
      "SolverService", "Solve",
      [this](const v1::ScheduleRequest& request, const CallContext&, TwirpRouter::Done<v1::Schedule> done) {
        if (stop_solves_) return done(Unavailable("the daemon is shutting down"));
        const int limit = 5 * config_.concurrent_solves;  // running, and four times as many waiting
        if (solves_in_flight_.fetch_add(1) >= limit) {
          solves_in_flight_.fetch_sub(1);
          return done(ResourceExhausted(std::to_string(limit) + " solves are running or waiting; try again later"));
        }
        boost::asio::post(solve_pool_, [this, request, done = std::move(done)] {
          done(Guarded([&] { return SolveAndStore(request); }));
          solves_in_flight_.fetch_sub(1);
        });
      },
      /*mutates=*/true);
  router_.Add<v1::GetScheduleRequest, v1::Schedule>(
      "SolverService", "GetSchedule",
      [db](const v1::GetScheduleRequest& request, const CallContext&) -> Result<v1::Schedule> {
        if (request.id() == 0) return InvalidArgument("id is required");
        if (request.id() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          return NotFound("no schedule " + std::to_string(request.id()));
        }
        EC_ASSIGN_OR_RETURN(costdb::CostDb * cost_db, ThreadDb(db));
        EC_ASSIGN_OR_RETURN(v1::Schedule schedule, cost_db->GetSchedule(static_cast<int64_t>(request.id())));
        schedule.set_id(request.id());
        return schedule;
      });
  router_.Add<v1::ListSchedulesRequest, v1::ListSchedulesResponse>(
      "SolverService", "ListSchedules",
      [db](const v1::ListSchedulesRequest& request, const CallContext&) -> Result<v1::ListSchedulesResponse> {
        EC_ASSIGN_OR_RETURN(costdb::CostDb * cost_db, ThreadDb(db));
        EC_ASSIGN_OR_RETURN(std::vector<costdb::StoredSchedule> stored,
                            cost_db->ListSchedules(request.model(), request.device()));
        v1::ListSchedulesResponse response;
        for (const costdb::StoredSchedule& s : stored) {
          v1::ScheduleSummary* summary = response.add_schedules();
          summary->set_id(static_cast<uint64_t>(s.id));
          *summary->mutable_request() = s.request;
          summary->set_status(s.status);
          summary->set_energy_j(s.energy_j);
          summary->set_superseded(s.superseded);
        }
        return response;
      });

  router_.Add<v1::StartProfileRequest, v1::Job>(
      "JobService", "StartProfile",
      [jobs](const v1::StartProfileRequest& request, const CallContext&) { return jobs->StartProfile(request); },
      /*mutates=*/true);
  router_.Add<v1::GetJobRequest, v1::Job>(
      "JobService", "GetJob", [jobs](const v1::GetJobRequest& request, const CallContext&) { return jobs->Get(request.id()); });
  router_.Add<v1::CancelJobRequest, v1::Job>(
      "JobService", "CancelJob",
      [jobs](const v1::CancelJobRequest& request, const CallContext&) { return jobs->Cancel(request.id()); },
      /*mutates=*/true);
  router_.Add<v1::ListJobsRequest, v1::ListJobsResponse>(
      "JobService", "ListJobs",
      [jobs](const v1::ListJobsRequest& request, const CallContext&) -> Result<v1::ListJobsResponse> {
        std::vector<v1::Job> all = jobs->List();  // by id, oldest first
        const size_t limit = request.limit() > 0 ? request.limit() : 100;
        v1::ListJobsResponse response;
        for (size_t i = all.size() > limit ? all.size() - limit : 0; i < all.size(); ++i) {
          *response.add_jobs() = std::move(all[i]);
        }
        return response;
      });
  router_.AddAsync<v1::WatchEventsRequest, v1::WatchEventsResponse>(
      "JobService", "WatchEvents",
      [jobs](const v1::WatchEventsRequest& request, const CallContext&, TwirpRouter::Done<v1::WatchEventsResponse> done) {
        jobs->Watch(request.after_sequence(), request.wait_s(), [done = std::move(done)](std::vector<v1::Event> events) {
          v1::WatchEventsResponse response;
          for (v1::Event& event : events) *response.add_events() = std::move(event);
          done(std::move(response));
        });
      });
}

Result<v1::Schedule> Daemon::SolveAndStore(const v1::ScheduleRequest& request) {
  if (request.ram_budget_bytes() == 0) return InvalidArgument("ram_budget_bytes is required");
  // Reading files on a caller's behalf would expose whatever the daemon's user can read.
  if (!request.graph_file().empty()) return InvalidArgument("graph_file is read by the local CLI only; name a model");
  EC_RETURN_IF_ERROR(graph::CheckModelName(request.model()));
  if (request.threads() > std::max(1u, std::thread::hardware_concurrency())) {
    return InvalidArgument("threads is at most " + std::to_string(std::max(1u, std::thread::hardware_concurrency())) +
                           " here, the number of cores");
  }
  if (request.time_limit_s() > kMaxSolveTimeS) {
    return InvalidArgument("time_limit_s is at most " + std::to_string(kMaxSolveTimeS) + " s over RPC");
  }
  EC_ASSIGN_OR_RETURN(costdb::CostDb * cost_db, ThreadDb(config_.db_path));
  EC_ASSIGN_OR_RETURN(profiler::SolvedRequest solved,
                      profiler::SolveRequest(cost_db, request, /*store=*/true, &stop_solves_));
  solved.schedule.set_id(static_cast<uint64_t>(solved.schedule_id));
  v1::Event event;
  event.set_kind("schedule");
  event.set_schedule_id(solved.schedule.id());
  event.set_message("schedule #" + std::to_string(solved.schedule.id()) + " stored for " + request.model());
  spdlog::info("event=schedule id={} model={} device={} status={} energy_j={:.6g} solve_s={:.3f}", solved.schedule.id(),
               Quoted(request.model()), Quoted(request.device()), v1::Schedule::Status_Name(solved.schedule.status()),
               solved.schedule.energy().total_j(), solved.schedule.solve_time_s());
  jobs_->Emit(std::move(event));
  return solved.schedule;
}

void Daemon::Handle(HttpRequest request, HttpReply reply) {
  if (request.target == "/healthz") return reply({200, "text/plain", "ok\n"});
  const bool has_token = !token_.empty() && ConstantTimeEquals(request.authorization, "Bearer " + token_);
  if (request.over_tcp && !has_token) {
    // The connection closes too, so unauthenticated callers hold no connection between attempts.
    HttpResponse refused = TwirpError("unauthenticated", 401, "TCP callers need 'Authorization: Bearer <token>'");
    refused.close_connection = true;
    Record(request.target, refused.status, 0);
    return reply(std::move(refused));
  }
  if (request.target == "/metrics") return reply({200, "text/plain; version=0.0.4", MetricsText()});

  const auto start = std::chrono::steady_clock::now();
  HttpReply measured = [this, target = request.target, start, reply = std::move(reply)](HttpResponse response) {
    const double elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    Record(target, response.status, elapsed_s);
    if (response.status >= 500 && response.status != 503) {
      spdlog::error("event=request_failed route={} status={} body={}", Quoted(target), response.status, Quoted(response.body));
    }
    spdlog::debug("event=request route={} status={} latency_ms={:.3f}", target, response.status, elapsed_s * 1e3);
    reply(std::move(response));
  };
  if (config_.restrict_mutations && router_.Mutates(request.target) && !has_token) {
    return measured(TwirpError("permission_denied", 403, "this call changes state and is restricted to token holders"));
  }
  HandleCostTableCached(request, std::move(measured));
}

void Daemon::Record(const std::string& target, int status, double elapsed_s) {
  const std::string route = router_.Has(target) ? target : "unknown";
  std::lock_guard lock(stats_mutex_);
  RouteStats& stats = stats_[route];
  if (stats.latency_buckets.empty()) stats.latency_buckets.assign(std::size(kLatencyBucketsS), 0);
  ++stats.requests;
  if (status >= 400) ++stats.errors;
  stats.latency_sum_s += elapsed_s;
  for (size_t b = 0; b < std::size(kLatencyBucketsS); ++b) {
    if (elapsed_s <= kLatencyBucketsS[b]) ++stats.latency_buckets[b];
  }
}

// Analytic cost tables depend on the request alone, and encoding one as JSON
// costs far more than computing it (0.31 ms against 0.06 ms for linear): their
// encoded responses are kept. Measured tables change, so they are always built anew.
void Daemon::HandleCostTableCached(const HttpRequest& request, HttpReply reply) {
  const std::string key = request.target == kCostTableRoute ? CostTableCacheKey(request) : std::string();
  if (key.empty()) return router_.Handle(request, CallContext{.authenticated = true}, std::move(reply));
  {
    std::lock_guard lock(cost_table_cache_mutex_);
    if (auto it = cost_table_responses_.find(key); it != cost_table_responses_.end()) return reply(it->second);
  }
  router_.Handle(request, CallContext{.authenticated = true},
                 [this, key, reply = std::move(reply)](HttpResponse response) {
                   if (response.status == 200) {
                     std::lock_guard lock(cost_table_cache_mutex_);
                     const std::string request_bytes = key.substr(key.find('\n') + 1);
                     if (analytic_requests_.count(request_bytes) && cost_table_responses_.size() < kMaxCachedTables) {
                       cost_table_responses_.emplace(key, response);
                     }
                   }
                   reply(std::move(response));
                 });
}

// Jobs by state, and every measuring probe: power sources as gauges, energy
// counters as raw totals (a wrap looks like a counter reset, which rate() handles).
void Daemon::JobAndProbeMetrics(std::ostream& out) {
  std::map<std::string, int> states;
  for (const v1::Job& job : jobs_->List()) ++states[v1::Job::State_Name(job.state())];
  out << "# HELP edgecost_jobs Jobs by state.\n# TYPE edgecost_jobs gauge\n";
  for (const auto& [state, count] : states) out << "edgecost_jobs{state=\"" << state << "\"} " << count << "\n";
  out << "# HELP edgecost_solves_in_flight Solve calls running or waiting for a solver thread.\n"
         "# TYPE edgecost_solves_in_flight gauge\nedgecost_solves_in_flight "
      << solves_in_flight_.load() << "\n"
      << "# HELP edgecost_event_watchers WatchEvents long polls waiting for an event.\n"
         "# TYPE edgecost_event_watchers gauge\nedgecost_event_watchers "
      << jobs_->WatcherCount() << "\n";
  out << "# HELP edgecost_probe_power_watts Live power per probe and rail.\n# TYPE edgecost_probe_power_watts gauge\n"
         "# HELP edgecost_probe_energy_joules_total Energy counters per probe and domain.\n"
         "# TYPE edgecost_probe_energy_joules_total counter\n";
  std::lock_guard lock(probes_mutex_);
  for (const auto& probe : probes_.probes) {
    Result<std::vector<double>> values = probe->Read();
    if (!values.ok()) continue;
    const bool power = probe->info().kind == probes::ReadingKind::kPower;
    for (size_t d = 0; d < values->size() && d < probe->info().domains.size(); ++d) {
      out << (power ? "edgecost_probe_power_watts" : "edgecost_probe_energy_joules_total") << "{source=\""
          << probe->info().source << "\",probe=\"" << probe->info().name << "\",domain=\"" << probe->info().domains[d]
          << "\"} " << (*values)[d] << "\n";
    }
  }
}

std::string Daemon::MetricsText() {
  std::ostringstream out;
  JobAndProbeMetrics(out);
  std::lock_guard lock(stats_mutex_);
  out << "# HELP edgecost_requests_total Twirp requests by route.\n# TYPE edgecost_requests_total counter\n";
  for (const auto& [route, s] : stats_) out << "edgecost_requests_total{route=\"" << route << "\"} " << s.requests << "\n";
  out << "# HELP edgecost_request_errors_total Twirp requests answered with an error.\n"
         "# TYPE edgecost_request_errors_total counter\n";
  for (const auto& [route, s] : stats_) out << "edgecost_request_errors_total{route=\"" << route << "\"} " << s.errors << "\n";
  out << "# HELP edgecost_request_seconds Time to answer a request.\n# TYPE edgecost_request_seconds histogram\n";
  for (const auto& [route, s] : stats_) {
    for (size_t b = 0; b < std::size(kLatencyBucketsS); ++b) {
      out << "edgecost_request_seconds_bucket{route=\"" << route << "\",le=\"" << kLatencyBucketsS[b] << "\"} "
          << s.latency_buckets[b] << "\n";
    }
    out << "edgecost_request_seconds_bucket{route=\"" << route << "\",le=\"+Inf\"} " << s.requests << "\n"
        << "edgecost_request_seconds_sum{route=\"" << route << "\"} " << s.latency_sum_s << "\n"
        << "edgecost_request_seconds_count{route=\"" << route << "\"} " << s.requests << "\n";
  }
  return out.str();
}

Result<int> Daemon::Start() {
  EC_RETURN_IF_ERROR(ValidateConfig(config_));
  EC_ASSIGN_OR_RETURN(DbLock lock, DbLock::Acquire(config_.db_path));
  db_lock_.emplace(std::move(lock));
  // Open the database once here so that a bad file fails the start, not the first request.
  EC_RETURN_IF_ERROR(costdb::CostDb::Open(config_.db_path, costdb::OpenMode::kReadWrite).status());
  EC_RETURN_IF_ERROR(jobs_->Open());
  server_ = std::make_unique<HttpServer>([this](HttpRequest r, HttpReply reply) { Handle(std::move(r), std::move(reply)); },
                                         config_.limits);
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
  return port;
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
  stop_solves_ = true;           // a running solve answers with its best schedule so far
  if (jobs_) jobs_->Shutdown();  // the running profile stops at its next op; measured ops are stored
  solve_pool_.join();
  if (server_) server_->Stop();
}

}  // namespace edgecost::daemon
