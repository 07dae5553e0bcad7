// The web view the agent serves at GET /: devices and their fingerprint
// history, models and cost tables, schedules with their pictures and plans,
// jobs, profile runs and live power. Pages are rendered here as plain HTML, so
// every table reads without JavaScript; web/app.js (built into the binary, like
// web/app.css) adds sorting, live job progress through WatchEvents and live
// power from /metrics. The page reads what the RPC services answer.
//
// Auth is the daemon's: over TCP a page needs the token. A browser cannot send
// a bearer header when it navigates, so the login form trades the token for a
// session cookie (HttpOnly, SameSite=Strict) that lasts the browser session.
#pragma once

#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "base/markup.h"
#include "daemon/http_server.h"
#include "daemon/metrics.h"
#include "daemon/services.h"
#include "probes/probe.h"

namespace edgecost::daemon {

// Session ids the login form hands out, in memory: a restart logs everyone out.
class WebSessions {
 public:
  static constexpr size_t kMaxSessions = 256;  // the oldest is dropped beyond this
  static constexpr const char* kCookie = "edgecost_session";

  std::string Create();
  bool Valid(const std::string& cookie_header);

 private:
  std::mutex mutex_;
  std::deque<std::string> ids_;
};

struct WebViewSources {
  costdb::Store* store = nullptr;  // the daemon's cost database
  CostService* costs = nullptr;
  SolverService* solver = nullptr;
  JobService* jobs = nullptr;
  TraceService* traces = nullptr;
  std::function<std::vector<ProbeReading>()> readings;          // as /metrics reads them
  std::function<std::vector<probes::ProbeInfo>()> probe_infos;  // every source looked at, with why not
};

class WebView {
 public:
  explicit WebView(WebViewSources sources) : sources_(std::move(sources)) {}

  // GET paths served here: "/", "/costs", "/schedule", "/trace" and "/assets/...".
  static bool Serves(const HttpRequest& request);
  // Static files carry no data, so they are served before the token check.
  static bool IsAsset(const HttpRequest& request);

  // Answers a GET of a path Serves() accepts.
  HttpResponse Get(const HttpRequest& request);
  static HttpResponse Asset(const HttpRequest& request);

  // The token form, with an error when a token was refused.
  static HttpResponse LoginPage(int status, std::string_view error);

 private:
  Markup Overview();
  Result<Markup> CostsPage(const std::string& query);
  Result<Markup> SchedulePage(const std::string& query);
  Result<Markup> TrainRunPage(const std::string& query);
  HttpResponse TraceDownload(const std::string& query);
  HttpResponse TrainedModelDownload(const std::string& path);
  HttpResponse CostsCsv(const std::string& query);
  HttpResponse SchedulesCsv();

  WebViewSources sources_;
};

// Parts of the web view that tests and the daemon share.
// The value of `key` in a query string or a form body (percent- and plus-decoded); empty if absent.
std::string FormValue(std::string_view query, std::string_view key);

}  // namespace edgecost::daemon
