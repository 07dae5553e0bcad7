// The web view through the daemon's whole request path (Daemon::Handle), in
// process: pages render from a real database, read without JavaScript, and
// follow the agent's auth rules over TCP (login form, session cookie).
#include "daemon/web_view.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <future>
#include <regex>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "costdb/costdb.h"
#include "daemon/daemon.h"
#include "graph/derive.h"
#include "service/cost_tables.h"
#include "service/profile_job.h"
#include "tests/service/trace_format.h"
#include "tests/temp_dir.h"

namespace edgecost::daemon {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kToken = "0123456789abcdef0123456789abcdef";

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::string Header(const HttpResponse& response, const std::string& name) {
  for (const auto& [key, value] : response.headers) {
    if (key == name) return value;
  }
  return "";
}

// A folder per test: the services keep one SQLite connection per thread and path.
class WebViewTest : public edgecost::testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    std::ofstream(dir_ / "token") << kToken << "\n";
    // A fake sysfs with one hwmon power monitor, so that live power has a reading.
    fs::create_directories(dir_ / "sys/class/hwmon/hwmon0");
    fs::create_directories(dir_ / "sys/devices/system/cpu");
    std::ofstream(dir_ / "sys/devices/system/cpu/online") << "0-1\n";
    std::ofstream(dir_ / "sys/class/hwmon/hwmon0/name") << "ina219\n";
    std::ofstream(dir_ / "sys/class/hwmon/hwmon0/power1_input") << "1500000\n";  // uW
    ::setenv("EDGECOST_SYSFS_ROOT", (dir_ / "sys").c_str(), 1);
    DaemonConfig config;
    config.db_path = (dir_ / "costs.db").string();
    config.socket_path = "";  // TCP alone: Unix socket paths are short, and these folders have long names
    config.tcp_port = 0;
    config.token_file = (dir_ / "token").string();
    config.fingerprint_check_s = 0;
    config.concurrent_solves = 1;
    daemon_ = std::make_unique<Daemon>(config);
    auto started = daemon_->Start();
    ASSERT_TRUE(started.ok()) << started.status().message();
  }
  void TearDown() override {
    daemon_.reset();
    ::unsetenv("EDGECOST_SYSFS_ROOT");
    TempDirTest::TearDown();
  }

  HttpResponse Call(HttpRequest request) {
    std::promise<HttpResponse> answered;
    daemon_->Handle(std::move(request), [&](HttpResponse r) { answered.set_value(std::move(r)); });
    return answered.get_future().get();
  }
  HttpResponse Get(const std::string& target, bool over_tcp = false, const std::string& cookie = "") {
    return Call({.method = "GET", .target = target, .cookie = cookie, .over_tcp = over_tcp});
  }

  int64_t StoreSchedule() {
    auto db = costdb::CostDb::Open((dir_ / "costs.db").string());
    EXPECT_TRUE(db.ok());
    v1::ScheduleRequest request;
    request.set_model("linear");
    request.set_device("a72");
    request.set_activation_budget_bytes(200000);
    request.set_runtime_budget_multiple(1.5);
    request.set_time_limit_s(20);
    auto solved = service::SolveRequest(&*db, request, true);
    EXPECT_TRUE(solved.ok()) << solved.status().message();
    return solved.ok() ? solved->schedule_id : 0;
  }

  std::unique_ptr<Daemon> daemon_;
};

TEST_F(WebViewTest, TheOverviewIsPlainHtmlWithEveryTable) {
  const HttpResponse page = Get("/");
  ASSERT_EQ(page.status, 200) << page.body;
  EXPECT_EQ(page.content_type, "text/html; charset=utf-8");
  EXPECT_THAT(Header(page, "Content-Security-Policy"), HasSubstr("script-src 'self'"));
  EXPECT_THAT(page.body, HasSubstr("<!doctype html>"));
  // This machine was recorded at start: one device row, with its fingerprint.
  auto db = costdb::CostDb::Open((dir_ / "costs.db").string(), costdb::OpenMode::kReadOnly);
  ASSERT_TRUE(db.ok());
  auto devices = db->ListDevices();
  ASSERT_TRUE(devices.ok());
  ASSERT_EQ(devices->size(), 1u);
  EXPECT_THAT(page.body, HasSubstr("<tr class=\"device\"><th scope=\"row\">" + HtmlEscape(devices->front().name())));
  EXPECT_THAT(page.body, HasSubstr(devices->front().fingerprint().hash().substr(0, 12)));
  for (const char* id : {"id=\"devices\"", "id=\"power\"", "id=\"models\"", "id=\"schedules\"", "id=\"jobs\"",
                         "id=\"runs\"", "id=\"model-table\"", "id=\"job-table\"", "id=\"power-table\""}) {
    EXPECT_THAT(page.body, HasSubstr(id));
  }
  // Live power from the same probes as /metrics; and what is missing, said plainly.
  EXPECT_THAT(page.body, HasSubstr("data-metric=\"hwmon|"));
  EXPECT_THAT(page.body, HasSubstr("1.500 W"));
  EXPECT_THAT(Get("/metrics").body, HasSubstr("} 1.5\n"));
  EXPECT_THAT(page.body, HasSubstr("What this machine cannot measure"));
  EXPECT_THAT(page.body, HasSubstr("RAPL"));
  // No inline script or style: the CSP forbids them, so the page must not need them.
  EXPECT_THAT(page.body, Not(HasSubstr("<script>")));
  EXPECT_THAT(page.body, Not(HasSubstr("style=")));
  EXPECT_THAT(page.body, HasSubstr("<script src=\"/assets/app.js\" defer></script>"));
}

// Names come from clients and graph files: on the overview they are text, even in an attribute.
TEST_F(WebViewTest, AHostileNameIsEscapedOnTheOverview) {
  const std::string script = "<script>alert(1)</script>", escaped = "&lt;script&gt;alert(1)&lt;/script&gt;";
  {
    auto db = costdb::CostDb::Open((dir_ / "costs.db").string());
    ASSERT_TRUE(db.ok());
    v1::Device device;
    device.set_name(script);
    device.set_kind(v1::Device::KIND_MEASURED);
    device.mutable_fingerprint()->set_hash("\"><img src=x onerror=alert(1)>");
    ASSERT_TRUE(db->UpsertDevice(device).ok());
    v1::TrainRun run;
    run.set_model(script);
    run.set_device(script);
    run.set_steps(2);
    run.set_disturbed(true);
    run.set_disturbance("\"><img src=x onerror=alert(2)>");
    ASSERT_TRUE(db->PutTrainRun(run).ok());
  }
  const HttpResponse page = Get("/");
  ASSERT_EQ(page.status, 200) << page.body;
  EXPECT_THAT(page.body, HasSubstr("<tr class=\"device\"><th scope=\"row\">" + escaped + "</th>"));
  EXPECT_THAT(page.body, HasSubstr("<option>" + escaped + "</option>"));
  EXPECT_THAT(page.body, HasSubstr("<td>" + escaped + " b0</td><td>" + escaped + "</td>"));
  EXPECT_THAT(page.body, HasSubstr("<code>&quot;&gt;&lt;img src=x onerror=alert(1)&gt;</code>"));
  EXPECT_THAT(page.body, HasSubstr("title=\"&quot;&gt;&lt;img src=x onerror=alert(2)&gt;\">DISTURBED"));
  EXPECT_THAT(page.body, Not(HasSubstr("<script>")));
  EXPECT_THAT(page.body, Not(HasSubstr("<img")));
}

TEST_F(WebViewTest, AssetsComeFromTheBinary) {
  for (const auto& [path, type] : {std::pair{"/assets/app.js", "text/javascript; charset=utf-8"},
                                   std::pair{"/assets/app.css", "text/css; charset=utf-8"}}) {
    const HttpResponse asset = Get(path, /*over_tcp=*/true);  // static files carry no data: no token needed
    EXPECT_EQ(asset.status, 200) << path;
    EXPECT_EQ(asset.content_type, type);
    EXPECT_GT(asset.body.size(), 1000u);
  }
  EXPECT_THAT(Get("/assets/app.js").body, HasSubstr("WatchEvents"));
  EXPECT_EQ(Get("/assets/../costs.db").status, 404);
  EXPECT_EQ(Get("/assets/nothing.js").status, 404);
}

TEST_F(WebViewTest, OverTcpThePageAsksForTheTokenOnceAndKeepsASession) {
  HttpResponse refused = Get("/", /*over_tcp=*/true);
  EXPECT_EQ(refused.status, 401);
  EXPECT_TRUE(refused.close_connection);
  EXPECT_THAT(refused.body, HasSubstr("<form method=\"post\" action=\"/login\">"));
  EXPECT_THAT(refused.body, Not(HasSubstr("device-table")));
  EXPECT_EQ(Get("/costs?model=linear&device=a72", true).status, 401);
  EXPECT_EQ(Get("/trace?schedule=1", true).status, 401);
  EXPECT_EQ(Get("/trained/1.onnx", true).status, 401);  // a trained model is the agent's data too
  EXPECT_EQ(Get("/metrics", true).status, 401);

  HttpRequest login{.method = "POST",
                    .target = "/login",
                    .content_type = "application/x-www-form-urlencoded",
                    .body = "token=wrong",
                    .over_tcp = true};
  HttpResponse wrong = Call(login);
  EXPECT_EQ(wrong.status, 401);
  EXPECT_THAT(wrong.body, HasSubstr("not this agent"));
  EXPECT_EQ(Header(wrong, "Set-Cookie"), "");

  login.body = std::string("token=") + kToken;
  HttpResponse right = Call(login);
  ASSERT_EQ(right.status, 303);
  EXPECT_EQ(Header(right, "Location"), "/");
  const std::string cookie = Header(right, "Set-Cookie");
  EXPECT_THAT(cookie, HasSubstr("HttpOnly"));
  EXPECT_THAT(cookie, HasSubstr("SameSite=Strict"));
  EXPECT_THAT(cookie, Not(HasSubstr(kToken)));  // a session id, never the token itself
  const std::string session = cookie.substr(0, cookie.find(';'));

  EXPECT_EQ(Get("/", true, "other=1; " + session).status, 200);
  EXPECT_EQ(Get("/metrics", true, session).status, 200);
  // The page's script calls Twirp with the same cookie.
  HttpResponse rpc = Call({.method = "POST",
                           .target = "/twirp/edgecost.v1.JobService/ListJobs",
                           .content_type = "application/json",
                           .cookie = session,
                           .body = "{}",
                           .over_tcp = true});
  EXPECT_EQ(rpc.status, 200) << rpc.body;
  // A made-up session is nobody's.
  std::string forged = session;
  forged.back() = forged.back() == '0' ? '1' : '0';
  EXPECT_EQ(Get("/", true, forged).status, 401);
  EXPECT_EQ(Get("/", true, "edgecost_session=short").status, 401);
}

TEST_F(WebViewTest, CostTablePageHasARowPerNodeSortedOnTheServer) {
  auto graph = graph::ZooTrainingGraph("linear", 1, graph::kDefaultDerivation);
  ASSERT_TRUE(graph.ok());
  const HttpResponse page = Get("/costs?model=linear&device=a72");
  ASSERT_EQ(page.status, 200) << page.body;
  EXPECT_EQ(Count(page.body, "<tr class=\"node\">"), static_cast<size_t>(graph->nodes_size()));
  EXPECT_THAT(page.body, HasSubstr("poet-flops"));
  EXPECT_THAT(page.body, HasSubstr("<svg class=\"bar runtime\""));

  // Sorted by runtime, slowest first: the runtime column's values never rise.
  const HttpResponse sorted = Get("/costs?model=linear&device=a72&sort=runtime");
  ASSERT_EQ(sorted.status, 200);
  const std::regex runtime_cell("</td><td data-value=\"([^\"]+)\"><svg class=\"bar runtime\"");
  std::vector<double> runtimes;
  for (auto it = std::sregex_iterator(sorted.body.begin(), sorted.body.end(), runtime_cell);
       it != std::sregex_iterator(); ++it) {
    runtimes.push_back(std::stod((*it)[1]));
  }
  ASSERT_EQ(runtimes.size(), static_cast<size_t>(graph->nodes_size()));
  EXPECT_TRUE(std::is_sorted(runtimes.rbegin(), runtimes.rend()));
  EXPECT_THAT(sorted.body, HasSubstr("aria-sort=\"descending\""));

  const HttpResponse missing = Get("/costs?model=no_such_model&device=a72");
  EXPECT_GE(missing.status, 400);
  EXPECT_THAT(missing.body, HasSubstr("class=\"error\""));
  EXPECT_EQ(Get("/costs").status, 400);
  // A name is escaped wherever it is shown.
  EXPECT_THAT(Get("/costs?model=%3Cscript%3E&device=a72").body, Not(HasSubstr("<script>")));
}

TEST_F(WebViewTest, ASchedulePageHasThePictureThePlanAndATrace) {
  const int64_t id = StoreSchedule();
  ASSERT_GT(id, 0);
  const HttpResponse overview = Get("/");
  EXPECT_THAT(overview.body, HasSubstr("<a href=\"/schedule?id=" + std::to_string(id) + "\">"));
  const HttpResponse page = Get("/schedule?id=" + std::to_string(id));
  ASSERT_EQ(page.status, 200) << page.body;
  EXPECT_THAT(page.body, HasSubstr("id=\"schedule-picture\""));
  EXPECT_THAT(page.body, HasSubstr("<polyline class=\"ram\""));
  EXPECT_THAT(page.body, HasSubstr("against the plain step"));
  EXPECT_THAT(page.body, HasSubstr("Predicted against measured"));
  EXPECT_THAT(page.body, HasSubstr("No measured training run of this schedule"));
  // poet-flops energy is a model's: said where it is shown; the picture's terms explained in a tooltip.
  EXPECT_THAT(page.body, ::testing::ContainsRegex("<dt>energy</dt><dd>[0-9.]+ [mun]?J ESTIMATED = compute"));
  EXPECT_THAT(page.body, HasSubstr("<title>A stage is one slice of the training step"));
  // A training run of this schedule is shown beside the predictions.
  {
    auto db = costdb::CostDb::Open((dir_ / "costs.db").string());
    ASSERT_TRUE(db.ok());
    v1::TrainRun run;
    run.set_model("linear");
    run.set_device("a72");
    run.set_schedule_id(static_cast<uint64_t>(id));
    run.set_steps(7);
    run.set_predicted_runtime_s(0.002);
    run.set_runtime_s(0.003);
    run.set_predicted_peak_bytes(7416);
    run.set_peak_activation_bytes(7000);
    v1::NodeTime& node = *run.add_nodes();
    node.set_node(1);
    node.set_name("fc1");
    node.set_executions(1);
    v1::StepEvent& compute = *run.add_last_step();
    compute.set_node(1);
    compute.set_start_s(0.001);
    compute.set_duration_s(0.002);
    ASSERT_TRUE(db->PutTrainRun(run).ok());
  }
  const HttpResponse measured = Get("/schedule?id=" + std::to_string(id));
  EXPECT_THAT(measured.body, HasSubstr("id=\"train-run-table\""));
  EXPECT_THAT(measured.body, HasSubstr("<td>7</td><td>2.00 ms</td><td>3.00 ms</td><td>7.42 kB</td><td>7.00 kB</td>"));
  EXPECT_THAT(page.body, HasSubstr("/trace?schedule=" + std::to_string(id)));
  EXPECT_THAT(measured.body, HasSubstr("<a href=\"/trace?train_run=1\">last step</a>"));
  const HttpResponse step = Get("/trace?train_run=1");
  ASSERT_EQ(step.status, 200) << step.body;
  EXPECT_EQ(edgecost::testing::CheckChromeTrace(step.body), "");
  EXPECT_THAT(step.body, HasSubstr("\"fc1\""));
  EXPECT_THAT(Header(step, "Content-Disposition"), HasSubstr("train-run-1.trace.json"));

  const HttpResponse trace = Get("/trace?schedule=" + std::to_string(id));
  ASSERT_EQ(trace.status, 200) << trace.body;
  EXPECT_THAT(Header(trace, "Content-Disposition"), HasSubstr("attachment"));
  EXPECT_EQ(edgecost::testing::CheckChromeTrace(trace.body), "");
  // The same over RPC.
  HttpResponse rpc = Call({.method = "POST",
                           .target = "/twirp/edgecost.v1.TraceService/GetTrace",
                           .content_type = "application/json",
                           .body = "{\"scheduleId\":\"" + std::to_string(id) + "\"}"});
  ASSERT_EQ(rpc.status, 200) << rpc.body;
  EXPECT_THAT(rpc.body, HasSubstr("traceJson"));

  EXPECT_EQ(Get("/schedule?id=999").status, 404);
  EXPECT_EQ(Get("/schedule?id=abc").status, 400);
  EXPECT_EQ(Get("/trace?schedule=999").status, 404);
  EXPECT_EQ(Get("/trace").status, 400);
}

TEST_F(WebViewTest, MeasuredCostsSitBesidePoetFlopsWithIntervalsAndDevicesShowWhatChanged) {
  costdb::Store store((dir_ / "costs.db").string(), costdb::OpenMode::kReadWrite);
  service::ProfileJobOptions options;
  options.database = &store;
  options.graph.model_or_file = "linear";
  options.graph.derivation = graph::Derivation::kExact;
  options.graph.batch_size = 2;
  options.threads = 1;
  options.min_window_s = 0.002;
  options.accept_noisy = true;  // about the page, not about how quiet the machine is
  auto profiled = service::RunProfileJob(
      options, nullptr, [](const profiler::ProfileProgress&) {}, [](const std::string&) {});
  ASSERT_TRUE(profiled.ok()) << profiled.status().message();
  const std::string device = profiled->device.name();

  // The profile's batch size and thread count; the overview links to it.
  const std::string table_query = "model=linear&amp;device=" + device + "&amp;batch=2&amp;threads=1";
  EXPECT_EQ(Get("/costs?model=linear&device=" + device + "&threads=1").status, 404);  // batch 1: none measured
  const HttpResponse page = Get("/costs?model=linear&device=" + device + "&batch=2&threads=1");
  ASSERT_EQ(page.status, 200) << page.body;
  EXPECT_THAT(page.body, HasSubstr("batch size 2"));
  EXPECT_THAT(page.body, HasSubstr("href=\"/costs.csv?" + table_query + "\""));
  EXPECT_EQ(Get("/costs?model=linear&device=" + device + "&batch=0").status, 400);
  EXPECT_EQ(Count(page.body, "<tr class=\"node\">"), static_cast<size_t>(profiled->graph.nodes_size()));
  EXPECT_THAT(page.body, HasSubstr("poet-flops runtime"));
  EXPECT_THAT(page.body, HasSubstr("poet-flops on a72 for the same graph"));
  EXPECT_THAT(page.body, HasSubstr("<path class=\"ci\""));  // the 95% interval of each measured median
  EXPECT_THAT(page.body, HasSubstr("(95%: "));
  const HttpResponse overview = Get("/");
  EXPECT_THAT(overview.body,
              HasSubstr("href=\"/costs?" + table_query + "\">measured on " + HtmlEscape(device) + ", batch 2, 1 thread</a>"));
  EXPECT_THAT(overview.body, HasSubstr("id=\"run-table\""));
  EXPECT_THAT(overview.body, HasSubstr("/trace?run=1"));

  // The governor changes: the device's history says what changed, and when.
  v1::Device changed = profiled->device;
  changed.mutable_fingerprint()->set_cpu_governor("test-governor");
  changed.mutable_fingerprint()->set_hash("changedhash0123");
  {
    auto db = costdb::CostDb::Open((dir_ / "costs.db").string());
    ASSERT_TRUE(db.ok());
    ASSERT_TRUE(db->UpsertDevice(changed).ok());
  }
  const HttpResponse after = Get("/");
  EXPECT_THAT(after.body, HasSubstr("1 change</summary>"));
  EXPECT_THAT(after.body, HasSubstr("<li>cpu_governor: (none) \u2192 &quot;test-governor&quot;</li>"));
}

TEST(WebForms, ValuesAreDecodedAndTextEscaped) {
  EXPECT_EQ(FormValue("a=1&token=x%2By+z&b=", "token"), "x+y z");
  EXPECT_EQ(FormValue("a=1&b=", "b"), "");
  EXPECT_EQ(FormValue("a=1", "token"), "");
  EXPECT_EQ(FormValue("t=%zz%4", "t"), "%zz%4");
  EXPECT_EQ(HtmlEscape("<a href=\"x\">'&'</a>"), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
}

}  // namespace
}  // namespace edgecost::daemon
