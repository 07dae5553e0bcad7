// The web view in a real browser: Debian's headless Chromium loads the page
// from a running `edgecost serve` over TCP (token, session cookie), driven over
// the DevTools protocol with Boost.Beast's WebSocket client. It asserts on the
// rendered DOM (devices, a cost table with a row per node, the schedule
// picture, a job's progress updating live), on the keyboard path and the phone
// layout, that every page at 1280 px and at phone width keeps its content inside
// the viewport (and, at 1280 px, out of sideways scrolling), and that the
// console shows no errors; screenshots of every page at both widths go to build/.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <boost/asio/connect.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/websocket.hpp>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "graph/derive.h"
#include "tests/daemon/serve_process.h"

namespace {

namespace fs = std::filesystem;
namespace asio = boost::asio;
namespace beast = boost::beast;
using nlohmann::json;
using tcp = asio::ip::tcp;
using namespace edgecost::test_support;

constexpr const char* kToken = "0123456789abcdef0123456789abcdef";

// Base64 decoding for screenshots (DevTools sends PNGs as base64).
std::string Base64Decode(const std::string& in) {
  std::string out;
  std::vector<int> table(256, -1);
  const std::string chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (size_t i = 0; i < chars.size(); ++i) table[static_cast<unsigned char>(chars[i])] = static_cast<int>(i);
  int value = 0, bits = -8;
  for (unsigned char c : in) {
    if (table[c] < 0) continue;
    value = (value << 6) + table[c];
    bits += 6;
    if (bits >= 0) {
      out.push_back(static_cast<char>((value >> bits) & 0xff));
      bits -= 8;
    }
  }
  return out;
}

// One page of Chromium over the DevTools protocol: commands answered in order,
// console and log errors collected from the events in between.
class DevTools {
 public:
  bool Connect(int port) {
    try {
      // A new tab over the HTTP endpoint, then its own WebSocket.
      tcp::resolver resolver(io_);
      beast::tcp_stream http_stream(io_);
      http_stream.connect(resolver.resolve("127.0.0.1", std::to_string(port)));
      beast::http::request<beast::http::string_body> request{beast::http::verb::put, "/json/new?about:blank", 11};
      request.set(beast::http::field::host, "127.0.0.1");
      beast::http::write(http_stream, request);
      beast::flat_buffer buffer;
      beast::http::response<beast::http::string_body> response;
      beast::http::read(http_stream, buffer, response);
      const json target = json::parse(response.body());
      const std::string url = target.at("webSocketDebuggerUrl");  // ws://127.0.0.1:PORT/devtools/page/ID
      const std::string path = url.substr(url.find('/', 5));
      auto const results = resolver.resolve("127.0.0.1", std::to_string(port));
      asio::connect(ws_.next_layer(), results);
      ws_.handshake("127.0.0.1:" + std::to_string(port), path);
      ws_.read_message_max(64 * 1024 * 1024);  // screenshots
      return true;
    } catch (const std::exception& e) {
      error_ = e.what();
      return false;
    }
  }
  const std::string& error() const { return error_; }

  json Send(const std::string& method, json params = json::object()) {
    const int id = ++next_id_;
    ws_.write(asio::buffer(json{{"id", id}, {"method", method}, {"params", std::move(params)}}.dump()));
    for (;;) {
      beast::flat_buffer buffer;
      ws_.read(buffer);
      json message = json::parse(beast::buffers_to_string(buffer.data()));
      if (message.contains("id") && message["id"] == id) {
        if (message.contains("error")) ADD_FAILURE() << method << ": " << message["error"].dump();
        return message.value("result", json::object());
      }
      Collect(message);
    }
  }

  // The value of a JavaScript expression (awaited if a promise).
  json Eval(const std::string& expression) {
    json result =
        Send("Runtime.evaluate", {{"expression", expression}, {"returnByValue", true}, {"awaitPromise", true}});
    if (result.contains("exceptionDetails")) {
      ADD_FAILURE() << expression << " threw " << result["exceptionDetails"].dump();
      return nullptr;
    }
    return result["result"].value("value", json());
  }

  // Polls `condition` (bounded; not a timing assertion) until it is true.
  bool WaitFor(const std::string& condition) {
    for (int i = 0; i < 400; ++i) {
      if (Eval("!!(" + condition + ")") == true) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  bool Navigate(const std::string& url) {
    Send("Page.navigate", {{"url", url}});
    return WaitFor("document.readyState === 'complete' && location.href === " + json(url).dump());
  }

  // The whole page, not only the viewport (at most 8000 CSS px down).
  void Screenshot(const fs::path& file) {
    const json size = Send("Page.getLayoutMetrics").value("cssContentSize", json::object());
    const double width = size.value("width", 0.0), height = std::min(size.value("height", 0.0), 8000.0);
    json params = {{"format", "png"}, {"captureBeyondViewport", true}};
    if (width > 0 && height > 0) {
      params["clip"] = {{"x", 0}, {"y", 0}, {"width", width}, {"height", height}, {"scale", 1}};
    }
    json shot = Send("Page.captureScreenshot", params);
    std::ofstream(file, std::ios::binary) << Base64Decode(shot.value("data", ""));
  }

  std::vector<std::string> TakeErrors() { return std::exchange(errors_, {}); }
  void Allow401(const std::string& url) { allowed_401_url_ = url; }

 private:
  void Collect(const json& message) {
    const std::string method = message.value("method", "");
    const json& params = message.contains("params") ? message["params"] : json::object();
    if (method == "Runtime.exceptionThrown") {
      errors_.push_back("exception: " + params["exceptionDetails"].dump());
    } else if (method == "Runtime.consoleAPICalled" && params.value("type", "") == "error") {
      errors_.push_back("console.error: " + params["args"].dump());
    } else if (method == "Log.entryAdded" && params["entry"].value("level", "") == "error") {
      // The login page answers 401 on purpose: that is the token being asked for, not an error.
      const std::string text = params["entry"].value("text", "");
      if (params["entry"].value("source", "") == "network" && text.find("status of 401") != std::string::npos &&
          params["entry"].value("url", "") == allowed_401_url_) {
        return;
      }
      errors_.push_back("log: " + params["entry"].value("text", "") + " " + params["entry"].value("url", ""));
    }
  }

  asio::io_context io_;
  beast::websocket::stream<tcp::socket> ws_{io_};
  int next_id_ = 0;
  std::vector<std::string> errors_;
  std::string error_;
  std::string allowed_401_url_;
};

// Elements whose box ends right of the viewport outside any scroll container, and
// whether the page itself scrolls sideways: content a reader cannot reach. The width is the
// emulated screen's, not window.innerWidth: a mobile browser zooms out to fit content wider than
// the screen, and innerWidth then grows with it, so that nothing would ever be found.
std::string Clipped(int screen_width_px) {
  return "((W) => {" + std::string(R"js(
  const bad = [];
  const name = el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
      (el.className && typeof el.className === 'string' ? '.' + el.className.trim().replace(/\s+/g, '.') : '');
  if (document.documentElement.scrollWidth > W) {
    bad.push('the page scrolls sideways: ' + document.documentElement.scrollWidth + ' > ' + W);
  }
  for (const el of document.querySelectorAll('body *')) {
    const r = el.getBoundingClientRect();
    if (r.width === 0 || r.right <= W + 0.5 || el.closest('.skip')) continue;
    let p = el.parentElement, contained = false;
    for (; p && p !== document.body; p = p.parentElement) {
      const o = getComputedStyle(p).overflowX;
      if (o === 'auto' || o === 'scroll') { contained = true; break; }
    }
    if (!contained) bad.push(name(el) + ' ends at ' + Math.round(r.right) + ' px: "' +
                             (el.innerText || el.textContent || '').slice(0, 40) + '"');
  }
  if (window.innerWidth > W) bad.push('the browser zoomed out to ' + window.innerWidth + ' px to fit the content');
  return bad.slice(0, 12);
})js") + ")(" + std::to_string(screen_width_px) + ")";
}

// Scroll containers whose content is wider than they are (at 1280 px, none should be).
constexpr const char* kScrolledAway = R"js((() => {
  const bad = [];
  for (const el of document.querySelectorAll('body *')) {
    const o = getComputedStyle(el).overflowX;
    if ((o === 'auto' || o === 'scroll') && el.scrollWidth > el.clientWidth + 1) {
      bad.push((el.firstElementChild && el.firstElementChild.id || el.tagName) + ': ' + el.scrollWidth +
               ' px of content in ' + el.clientWidth + ' px');
    }
  }
  return bad;
})())js";

// Text of a picture (but the schedule's slanted layer names) that overlaps other text or leaves the
// picture.
std::string SvgOverlaps(const std::string& svg_selector) {
  return "((selector) => {" + std::string(R"js(
  const svg = document.querySelector(selector), box = svg.getBoundingClientRect(), bad = [];
  const texts = Array.from(svg.querySelectorAll('text:not(.layer)')).map(t => [t.textContent, t.getBoundingClientRect()]);
  for (const [t, r] of texts) {
    if (r.left < box.left - 0.5 || r.right > box.right + 0.5) bad.push('"' + t + '" leaves the picture');
  }
  for (let i = 0; i < texts.length; ++i) {
    for (let j = i + 1; j < texts.length; ++j) {
      const [a, ra] = texts[i], [b, rb] = texts[j];
      if (ra.left < rb.right && rb.left < ra.right && ra.top < rb.bottom && rb.top < ra.bottom) {
        bad.push('"' + a + '" overlaps "' + b + '"');
      }
    }
  }
  return bad;
})js") + ")(" + json(svg_selector).dump() + ")";
}

// The smallest font size of a picture's text as drawn on the screen, in CSS pixels: an SVG scaled
// down to a phone's width scales its labels with it.
std::string SmallestDrawnFontPx(const std::string& svg_selector) {
  return "Math.min(...Array.from(document.querySelectorAll(" + json(svg_selector + " text").dump() +
         ")).map(t => parseFloat(getComputedStyle(t).fontSize) * t.getScreenCTM().a))";
}

class BrowserTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("edgecost_browser_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "sys/devices/system/cpu");
    std::ofstream(dir_ / "sys/devices/system/cpu/online") << "0-1\n";
    fs::create_directories(dir_ / "sys/class/hwmon/hwmon0");  // a power monitor, for live power
    std::ofstream(dir_ / "sys/class/hwmon/hwmon0/name") << "ina219\n";
    std::ofstream(dir_ / "sys/class/hwmon/hwmon0/power1_input") << "1500000\n";  // uW
    std::ofstream(dir_ / "token") << kToken << "\n";
    if (Shell("command -v chromium").empty()) {
      GTEST_SKIP() << "chromium is not installed here; scripts/deps installs it (apt-get install chromium)";
    }
    port_ = 30000 + ::getpid() % 20000;
    serve_ = SpawnServe({"--db", (dir_ / "costs.db").string(), "serve", "--socket", Socket(), "--tcp",
                         "127.0.0.1:" + std::to_string(port_), "--token-file", (dir_ / "token").string()},
                        Socket(), dir_ / "sys", dir_ / "serve.log");
    ASSERT_TRUE(Serving(Socket())) << Shell("cat " + (dir_ / "serve.log").string());
  }

  void TearDown() override {
    if (chromium_ > 0) StopProcess(chromium_, SIGKILL);
    if (serve_ > 0) StopProcess(serve_);
    fs::remove_all(dir_);
  }

  std::string Socket() const { return (dir_ / "edgecost.sock").string(); }
  std::string Url(const std::string& path) const { return "http://127.0.0.1:" + std::to_string(port_) + path; }

  // Headless Chromium with a fresh profile; returns its DevTools port, or 0 with the reason in `why`.
  int StartChromium(std::string& why) {
    const fs::path profile = dir_ / "chromium-profile";
    fs::create_directories(profile);
    chromium_ = ::fork();
    if (chromium_ == 0) {
      if (!std::freopen((dir_ / "chromium.log").c_str(), "w", stderr)) ::_exit(126);
      if (!std::freopen("/dev/null", "w", stdout)) ::_exit(126);
      const std::string user_data = "--user-data-dir=" + profile.string();
      ::execlp("chromium", "chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--disable-dev-shm-usage", "--remote-debugging-port=0", "--remote-allow-origins=*", user_data.c_str(),
               "about:blank", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    // Chromium writes the port it picked into DevToolsActivePort.
    for (int i = 0; i < 300; ++i) {
      std::ifstream in(profile / "DevToolsActivePort");
      int port = 0;
      if (in >> port && port > 0) return port;
      int status = 0;
      if (::waitpid(chromium_, &status, WNOHANG) == chromium_) {
        chromium_ = 0;
        why = "chromium exited: " + Shell("tail -5 " + (dir_ / "chromium.log").string());
        return 0;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    why = "chromium never opened its DevTools port: " + Shell("tail -5 " + (dir_ / "chromium.log").string());
    return 0;
  }

  fs::path dir_;
  int port_ = 0;
  pid_t serve_ = 0;
  pid_t chromium_ = 0;
};

TEST_F(BrowserTest, ThePageShowsDevicesCostsASchedulePictureAndLiveJobs) {
  // A stored schedule to look at.
  const std::string solved = CallJson(
      Socket(), "SolverService/Solve",
      R"({"model":"linear","device":"a72","activationBudgetBytes":"200000","runtimeBudgetMultiple":1.5,"timeLimitS":20})");
  ASSERT_THAT(solved, ::testing::EndsWith(" 200")) << solved;
  const std::string schedule_id = json::parse(solved.substr(0, solved.rfind(' '))).at("id");

  std::string why;
  const int devtools_port = StartChromium(why);
  if (devtools_port == 0) GTEST_SKIP() << "chromium cannot run here: " << why;
  DevTools page;
  ASSERT_TRUE(page.Connect(devtools_port)) << page.error();
  page.Send("Runtime.enable");
  page.Send("Log.enable");
  page.Send("Page.enable");
  page.Send("Emulation.setDeviceMetricsOverride",
            {{"width", 1280}, {"height", 800}, {"deviceScaleFactor", 1}, {"mobile", false}});

  // Over TCP the page asks for the token once.
  page.Allow401(Url("/"));
  ASSERT_TRUE(page.Navigate(Url("/")));
  ASSERT_TRUE(page.WaitFor("document.getElementById('token')"));
  page.Eval("document.getElementById('token').value = '" + std::string(kToken) +
            "'; document.querySelector('form').submit(); true");
  ASSERT_TRUE(page.WaitFor("document.getElementById('device-table')")) << page.Eval("document.body.innerText");

  // Devices: this machine, recorded by the agent at start.
  EXPECT_GE(page.Eval("document.querySelectorAll('#device-table tr.device').length").get<int>(), 1);
  // Keyboard: the first Tab reaches the skip link.
  page.Send("Input.dispatchKeyEvent",
            {{"type", "rawKeyDown"}, {"key", "Tab"}, {"code", "Tab"}, {"windowsVirtualKeyCode", 9}});
  page.Send("Input.dispatchKeyEvent",
            {{"type", "keyUp"}, {"key", "Tab"}, {"code", "Tab"}, {"windowsVirtualKeyCode", 9}});
  EXPECT_EQ(page.Eval("document.activeElement.className"), "skip");
  // Live power: the page reads /metrics again, and a new reading of the monitor shows.
  std::ofstream(dir_ / "sys/class/hwmon/hwmon0/power1_input") << "2250000\n";
  EXPECT_TRUE(
      page.WaitFor("Array.from(document.querySelectorAll('#power-table tr[data-metric^=\"hwmon|\"] .watts'))"
                   ".some(td => td.textContent === '2.250 W')"))
      << page.Eval("document.getElementById('power-table').innerText");
  page.Screenshot(fs::path(EDGECOST_BUILD_DIR) / "web-view-overview-1280x800.png");

  // A job started now: its row appears and its progress moves, through WatchEvents alone.
  const std::string started = CallJson(Socket(), "JobService/StartProfile", R"({"model":"linear","acceptNoisy":true})");
  ASSERT_THAT(started, ::testing::EndsWith(" 200")) << started;
  const std::string job_id = json::parse(started.substr(0, started.rfind(' '))).at("id");
  const std::string row = "document.getElementById('job-" + job_id + "')";
  std::set<std::string> seen;
  for (int i = 0; i < 1200; ++i) {
    const json state = page.Eval(row + " ? " + row + ".querySelector('.state').textContent + ' ' + " + row +
                                 ".querySelector('progress').value : ''");
    if (state.is_string() && !state.get<std::string>().empty()) seen.insert(state.get<std::string>());
    if (seen.count("succeeded 100") || seen.count("failed 0")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(seen.count("succeeded 100")) << ::testing::PrintToString(seen);
  EXPECT_GE(seen.size(), 2u) << "the row never changed after it appeared: " << ::testing::PrintToString(seen);

  // A training run on the measured costs: listed apart from the profile runs, with its model.
  const std::string trained = CallJson(Socket(), "JobService/StartTrain", R"({"model":"linear","steps":3})");
  ASSERT_THAT(trained, ::testing::EndsWith(" 200")) << trained;
  const std::string train_job = json::parse(trained.substr(0, trained.rfind(' '))).at("id");
  const std::string train_row = "document.getElementById('job-" + train_job + "')";
  EXPECT_TRUE(page.WaitFor(train_row + " && /succeeded|failed/.test(" + train_row + ".querySelector('.state').textContent)"));
  EXPECT_EQ(page.Eval(train_row + ".querySelector('.state').textContent"), "succeeded")
      << page.Eval(train_row + ".innerText");
  ASSERT_TRUE(page.Navigate(Url("/")));
  // The profile's steps (plain on all cores, paging, plain on one thread) and the job's run, newest first.
  EXPECT_GE(page.Eval("document.querySelectorAll('#train-runs-table tr.train-run').length").get<int>(), 2)
      << page.Eval("document.getElementById('train-runs').innerText");
  EXPECT_THAT(page.Eval("document.querySelector('#train-runs-table tr.train-run').innerText").get<std::string>(),
              ::testing::HasSubstr("\t3\t"));  // the job's 3 steps first
  EXPECT_THAT(page.Eval("document.querySelector('#train-runs-table tr.train-run').innerText").get<std::string>(),
              ::testing::HasSubstr("linear"));
  EXPECT_EQ(page.Eval("document.querySelector('header nav a[href=\"/#runs\"]').textContent"), "Profile runs");
  EXPECT_EQ(page.Eval("document.querySelector('#run-table tr.profile-run').cells[1].textContent"), "linear");
  EXPECT_EQ(page.Eval("document.querySelector('header nav a[href=\"/#train-runs\"]').textContent"), "Training runs");
  // Its page plots the loss and the step time over its three steps, with units on the axes.
  const std::string train_run_href =
      page.Eval("document.querySelector('#train-runs-table tr.train-run a[href^=\"/train_run\"]').getAttribute('href')");
  ASSERT_TRUE(page.Navigate(Url(train_run_href)));
  EXPECT_EQ(page.Eval("document.querySelectorAll('#train-run-plot svg polyline').length"), 2);
  // A dot per step and panel, or an outlier's triangle at the step-time panel's top edge.
  EXPECT_EQ(page.Eval("document.querySelectorAll('#train-run-plot svg circle, #train-run-plot svg path.outlier').length"),
            6);
  EXPECT_THAT(page.Eval("document.querySelector('#train-run-plot svg').textContent").get<std::string>(),
              ::testing::AllOf(::testing::HasSubstr("step time"), ::testing::ContainsRegex("[0-9] [mu]?s")));

  // The schedule list says where a model, not a sensor, gave the energy (poet-flops on a preset), and
  // offers the list as CSV, a row per schedule, its energy in joules.
  ASSERT_TRUE(page.Navigate(Url("/")));
  EXPECT_THAT(page.Eval("document.querySelector('#schedule-table a[href=\"/schedule?id=" + schedule_id +
                        "\"]').closest('tr').innerText")
                  .get<std::string>(),
              ::testing::ContainsRegex("[0-9.]+ [mun]?J ESTIMATED"));
  const json schedules_csv =
      page.Eval("fetch(document.getElementById('schedules-csv').getAttribute('href')).then(r => r.text())");
  ASSERT_TRUE(schedules_csv.is_string());
  EXPECT_THAT(schedules_csv.get<std::string>(),
              ::testing::AllOf(::testing::StartsWith("schedule,model,device,cost_source,strategy,"),
                               ::testing::HasSubstr("\n" + schedule_id + ",linear,a72,poet-flops,optimal,")));

  // A cost table with a row per node of the training graph, sortable from the page.
  auto graph = edgecost::graph::ZooTrainingGraph("linear", 1, edgecost::graph::kDefaultDerivation);
  ASSERT_TRUE(graph.ok());
  ASSERT_TRUE(page.Navigate(Url("/costs?model=linear&device=a72")));
  EXPECT_EQ(page.Eval("document.querySelectorAll('#cost-table tbody tr').length").get<int>(), graph->nodes_size());
  page.Eval("document.querySelector('#cost-table th[data-sort] a[href*=\"sort=runtime\"]').click(); true");
  EXPECT_EQ(page.Eval("document.querySelector('#cost-table th[aria-sort]').textContent"), "runtime");
  EXPECT_EQ(
      page.Eval(
          "(() => { const v = Array.from(document.querySelectorAll('#cost-table tbody tr'))"
          ".map(r => parseFloat(r.cells[3].dataset.value)); return v.every((x, i) => i == 0 || v[i-1] >= x); })()"),
      true);
  // The same table as CSV, a row per node.
  const std::string csv_href = page.Eval("document.getElementById('costs-csv').getAttribute('href')");
  const json csv = page.Eval("fetch(" + json(csv_href).dump() + ").then(r => r.text())");
  ASSERT_TRUE(csv.is_string());
  const std::string csv_text = csv;
  EXPECT_EQ(std::count(csv_text.begin(), csv_text.end(), '\n'), graph->nodes_size() + 1);
  EXPECT_THAT(csv_text, ::testing::StartsWith("node,name,phase,runtime_s,compute_j,ram_bytes,"));
  page.Screenshot(fs::path(EDGECOST_BUILD_DIR) / "web-view-costs-1280x800.png");

  // The schedule: its picture with the RAM curve, drawn with a real size.
  ASSERT_TRUE(page.Navigate(Url("/schedule?id=" + schedule_id)));
  EXPECT_TRUE(page.WaitFor("document.querySelector('#schedule-picture svg polyline.ram')"));
  EXPECT_GT(page.Eval("document.querySelector('#schedule-picture svg').getBoundingClientRect().width").get<double>(),
            200);
  page.Screenshot(fs::path(EDGECOST_BUILD_DIR) / "web-view-schedule-1280x800.png");

  // A failed request is listed as having no schedule: no energy, nothing to trace.
  const std::string failed = CallJson(
      Socket(), "SolverService/Solve",
      R"({"model":"linear","device":"a72","activationBudgetBytes":"1000","runtimeBudgetMultiple":1.5,"timeLimitS":20})");
  ASSERT_THAT(failed, ::testing::EndsWith(" 200")) << failed;
  const std::string failed_id = json::parse(failed.substr(0, failed.rfind(' '))).at("id");
  ASSERT_TRUE(page.Navigate(Url("/")));
  const std::string failed_row =
      "document.querySelector('#schedule-table a[href=\"/schedule?id=" + failed_id + "\"]').closest('tr')";
  EXPECT_THAT(page.Eval(failed_row + ".innerText").get<std::string>(),
              ::testing::AllOf(::testing::HasSubstr("no schedule"), ::testing::Not(::testing::HasSubstr(" J"))));
  EXPECT_EQ(page.Eval(failed_row + ".querySelectorAll('a[href^=\"/trace\"]').length"), 0);

  // Every page at 1280 px and at phone width: nothing clipped outside the viewport.
  const json measured_href = page.Eval("(document.querySelector('#model-table a.measured') || {}).href || ''");
  std::vector<std::pair<std::string, std::string>> pages = {
      {"overview", "/"},
      {"costs", "/costs?model=linear&device=a72"},
      {"schedule", "/schedule?id=" + schedule_id},
      {"failed-schedule", "/schedule?id=" + failed_id},
      {"train-run", train_run_href},
  };
  if (measured_href.is_string() && !measured_href.get<std::string>().empty()) {
    const std::string href = measured_href;
    pages.emplace_back("costs-measured", href.substr(href.find("/costs")));
  } else {
    ADD_FAILURE() << "the overview links no measured cost table after the profile job";
  }
  for (const auto& [width, height, scale, mobile] :
       {std::tuple{1280, 800, 1, false}, std::tuple{390, 844, 2, true}}) {
    page.Send("Emulation.setDeviceMetricsOverride",
              {{"width", width}, {"height", height}, {"deviceScaleFactor", scale}, {"mobile", mobile}});
    for (const auto& [name, path] : pages) {
      SCOPED_TRACE(name + " at " + std::to_string(width) + " px");
      ASSERT_TRUE(page.Navigate(Url(path)));
      EXPECT_THAT(page.Eval(Clipped(width)).get<std::vector<std::string>>(), ::testing::IsEmpty());
      if (width >= 1280) {  // at desktop width nothing hides behind a sideways scroll either
        EXPECT_THAT(page.Eval(kScrolledAway).get<std::vector<std::string>>(), ::testing::IsEmpty());
      }
      if (name == "schedule") {
        EXPECT_THAT(page.Eval(SvgOverlaps("#schedule-picture svg")).get<std::vector<std::string>>(), ::testing::IsEmpty());
        EXPECT_LE(page.Eval("document.querySelector('#schedule-picture svg').getBoundingClientRect().right").get<double>(),
                  width);
      }
      if (name == "train-run") {  // its labels stay readable on a phone, and apart
        EXPECT_GE(page.Eval(SmallestDrawnFontPx("#train-run-plot svg")).get<double>(), 10.0);
        EXPECT_THAT(page.Eval(SvgOverlaps("#train-run-plot svg")).get<std::vector<std::string>>(), ::testing::IsEmpty());
        EXPECT_LE(page.Eval("document.querySelector('#train-run-plot svg').getBoundingClientRect().right").get<double>(),
                  width);
      }
      page.Screenshot(fs::path(EDGECOST_BUILD_DIR) /
                      ("web-view-" + name + "-" + std::to_string(width) + "x" + std::to_string(height) + ".png"));
    }
  }

  EXPECT_THAT(page.TakeErrors(), ::testing::IsEmpty());
}

}  // namespace
