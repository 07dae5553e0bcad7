#include "daemon/web_view.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <tuple>

#include <google/protobuf/text_format.h>

#include "base/units.h"
#include "costdb/costdb.h"
#include "daemon/jobs.h"
#include "graph/cost_source.h"
#include "profiler/profile.h"
#include "service/cost_tables.h"
#include "service/train_job.h"
#include "service/train_plot.h"
#include "service/words.h"
#include "solver/explain.h"
#include "solver/svg.h"
#include "web/assets.h"

namespace edgecost::daemon {
namespace {

// No inline script or style: the page runs only what the binary carries.
constexpr const char* kContentSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

HttpResponse Html(int status, Markup page) {
  HttpResponse response{status, "text/html; charset=utf-8", std::move(page).text()};
  response.headers = {{"Content-Security-Policy", kContentSecurityPolicy},
                      {"X-Content-Type-Options", "nosniff"},
                      {"Referrer-Policy", "no-referrer"},
                      {"Cache-Control", "no-store"}};
  return response;
}

std::string Path(const std::string& target) { return target.substr(0, target.find('?')); }
std::string Query(const std::string& target) {
  const size_t q = target.find('?');
  return q == std::string::npos ? "" : target.substr(q + 1);
}

std::string Url(std::string_view text) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

std::string Fixed(double value, int digits) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.*f", digits, value);
  return buffer;
}

std::string Loss(double loss) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.4g", loss);
  return buffer;
}

Markup Layout(std::string_view title, const Markup& body) {
  HtmlWriter page;
  page << "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
          "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
          "<link rel=\"icon\" href=\"data:,\">"
          "<title>"
       << title
       << " - edgecost</title><link rel=\"stylesheet\" href=\"/assets/app.css\">"
          "<script src=\"/assets/app.js\" defer></script></head>\n<body>"
          "<a class=\"skip\" href=\"#main\">Skip to content</a>"
          "<header class=\"top\"><a class=\"brand\" href=\"/\">edgecost</a><nav aria-label=\"Sections\">"
          "<a href=\"/#devices\">Devices</a><a href=\"/#power\">Power</a><a href=\"/#models\">Cost tables</a>"
          "<a href=\"/#schedules\">Schedules</a><a href=\"/#jobs\">Jobs</a><a href=\"/#runs\">Profile runs</a>"
          "<a href=\"/#train-runs\">Training runs</a></nav></header>\n"
          "<main id=\"main\" tabindex=\"-1\">\n"
       << body << "</main>\n</body></html>\n";
  return page.str();
}

Markup ErrorBox(const Status& status) {
  return (HtmlWriter() << "<p class=\"error\" role=\"alert\">" << status.message() << "</p>").str();
}

// A bar scaled to `max`, with an optional 95% interval as a whisker: SVG, so it
// needs neither script nor inline style.
Markup Bar(double value, double max, std::optional<std::pair<double, double>> interval, const char* cls) {
  constexpr double kWidth = 120;
  auto x = [&](double v) { return max > 0 ? std::clamp(kWidth * v / max, 0.0, kWidth) : 0.0; };
  HtmlWriter svg;
  svg << "<svg class=\"bar " << cls
      << "\" width=\"120\" height=\"12\" viewBox=\"0 0 120 12\" aria-hidden=\"true\">"
         "<rect x=\"0\" y=\"2\" height=\"8\" width=\""
      << Fixed(x(value), 1) << "\"/>";
  if (interval) {
    const std::string lo = Fixed(x(interval->first), 1), hi = Fixed(x(interval->second), 1);
    svg << "<path class=\"ci\" d=\"M" << lo << " 6H" << hi << "M" << lo << " 2V10M" << hi << " 2V10\"/>";
  }
  return (svg << "</svg>").str();
}

// A link to /trace?<what>=<id>, or "none" where there is nothing to trace.
Markup TraceLink(bool any, std::string_view what, uint64_t id, std::string_view label) {
  if (!any) return "none";
  return (HtmlWriter() << "<a href=\"/trace?" << what << "=" << id << "\">" << label << "</a>").str();
}

const char* PhaseText(v1::Phase phase) {
  switch (phase) {
    case v1::PHASE_FORWARD:
      return "forward";
    case v1::PHASE_LOSS:
      return "loss";
    case v1::PHASE_BACKWARD:
      return "backward";
    case v1::PHASE_UNSPECIFIED:
    default:
      return "";
  }
}

// What changed between two fingerprints, field by field ("cpu_governor: powersave -> performance").
std::vector<std::string> FingerprintChanges(const v1::Fingerprint& before, const v1::Fingerprint& after) {
  std::vector<std::string> changes;
  const auto* descriptor = v1::Fingerprint::descriptor();
  for (int f = 0; f < descriptor->field_count(); ++f) {
    const auto* field = descriptor->field(f);
    if (field->name() == "hash") continue;
    std::string a, b;
    google::protobuf::TextFormat::PrintFieldValueToString(before, field, -1, &a);
    google::protobuf::TextFormat::PrintFieldValueToString(after, field, -1, &b);
    if (a == b) continue;
    if (a == "\"\"" || a == "0") a = "(none)";
    if (b == "\"\"" || b == "0") b = "(none)";
    changes.push_back(std::string(field->name()) + ": " + a + " \u2192 " + b);
  }
  return changes;
}

Markup DeviceSection(costdb::CostDb& db, const std::vector<v1::Device>& devices) {
  HtmlWriter out;
  out << "<section id=\"devices\" aria-labelledby=\"devices-h\"><h2 id=\"devices-h\">Devices</h2>";
  if (devices.empty()) {
    out << "<p>No devices yet: the agent records this machine when it starts, and presets when a cost table is "
           "stored.</p></section>";
    return out.str();
  }
  out << "<div class=\"scroll\"><table id=\"device-table\"><thead><tr><th scope=\"col\">device</th>"
         "<th scope=\"col\">kind</th><th scope=\"col\">fingerprint</th><th scope=\"col\">CPU</th>"
         "<th scope=\"col\">cores</th><th scope=\"col\">memory</th><th scope=\"col\">oneDNN ISA</th>"
         "<th scope=\"col\">kernel</th><th scope=\"col\">history</th></tr></thead><tbody>";
  for (const v1::Device& device : devices) {
    const v1::Fingerprint& f = device.fingerprint();
    const bool preset = device.kind() == v1::Device::KIND_PRESET;
    out << "<tr class=\"device\"><th scope=\"row\">" << device.name() << "</th><td>" << (preset ? "preset" : "measured")
        << "</td><td class=\"fingerprint\"><code>" << f.hash() << "</code></td><td class=\"wrap\">"
        << (preset ? "board preset " + f.board_preset() : f.cpu_model()) << "</td><td>"
        << (preset ? "" : std::to_string(f.online_cores())) << "</td><td>"
        << (preset ? "" : FormatBytes(static_cast<double>(f.memory_bytes()))) << "</td><td>" << f.dnnl_isa()
        << "</td><td class=\"wrap\">" << f.kernel_release() << "</td><td class=\"wrap history\">";
    Result<std::vector<costdb::FingerprintRecord>> history = db.ListFingerprintHistory(device.name());
    if (!history.ok()) {
      out << history.status().message();
    } else if (history->size() <= 1) {
      out << "unchanged since " << (history->empty() ? "" : history->front().first_seen_at);
    } else {
      out << "<details><summary>" << history->size() - 1 << " change" << (history->size() > 2 ? "s" : "")
          << "</summary><ol class=\"history\">";
      for (size_t i = 0; i + 1 < history->size(); ++i) {
        const costdb::FingerprintRecord& now = (*history)[i];
        const costdb::FingerprintRecord& was = (*history)[i + 1];
        out << "<li><time>" << now.first_seen_at << "</time>: <code class=\"fingerprint\">" << was.fingerprint.hash()
            << "</code> \u2192 <code class=\"fingerprint\">" << now.fingerprint.hash() << "</code><ul>";
        for (const std::string& change : FingerprintChanges(was.fingerprint, now.fingerprint)) {
          out << "<li>" << change << "</li>";
        }
        out << "</ul></li>";
      }
      out << "<li><time>" << history->back().first_seen_at << "</time>: first seen</li></ol></details>";
    }
    out << "</td></tr>";
  }
  out << "</tbody></table></div></section>";
  return out.str();
}

Markup PowerSection(const WebViewSources& sources) {
  HtmlWriter out;
  out << "<section id=\"power\" aria-labelledby=\"power-h\"><h2 id=\"power-h\">Live power</h2>"
         "<p class=\"hint\">Read like <a href=\"/metrics\">/metrics</a>, at each page load; with JavaScript, "
         "every two seconds (counters become watts between two readings).</p>";
  const std::vector<ProbeReading> readings = sources.readings ? sources.readings() : std::vector<ProbeReading>{};
  out << "<div class=\"scroll\"><table id=\"power-table\"><thead><tr><th scope=\"col\">source</th>"
         "<th scope=\"col\">probe</th><th scope=\"col\">domain</th><th scope=\"col\">reading</th>"
         "<th scope=\"col\">power</th></tr></thead><tbody>";
  for (const ProbeReading& r : readings) {
    out << "<tr data-metric=\"" << r.source + "|" + r.probe + "|" + r.domain << "\" data-kind=\""
        << (r.power ? "power" : "energy") << "\"><td>" << r.source << (r.measured ? "" : " (estimate)") << "</td><td>"
        << r.probe << "</td><td>" << r.domain << "</td><td class=\"reading\">"
        << (r.power ? Fixed(r.value, 3) + " W" : Fixed(r.value, 3) + " J total") << "</td><td class=\"watts\">"
        << (r.power ? Fixed(r.value, 3) + " W" : "needs two readings") << "</td></tr>";
  }
  out << "</tbody></table></div>";
  if (readings.empty()) {
    out << "<p>No sensor gives a reading here: energies are estimated with the device power model and labelled "
           "as estimates wherever they are shown.</p>";
  }
  if (sources.probe_infos) {
    HtmlWriter missing;
    for (const probes::ProbeInfo& info : sources.probe_infos()) {
      if (info.available) continue;
      missing << "<li><strong>" << info.source << "</strong> " << info.name << ": " << info.reason
              << (info.fix.empty() ? "" : " Fix: " + info.fix) << "</li>";
    }
    if (!missing.empty()) {
      out << "<details><summary>What this machine cannot measure</summary><ul>" << missing.str() << "</ul></details>";
    }
  }
  out << "</section>";
  return out.str();
}

Markup ModelsSection(costdb::CostDb& db, const WebViewSources& sources, const std::vector<v1::Device>& devices) {
  HtmlWriter out;
  out << "<section id=\"models\" aria-labelledby=\"models-h\"><h2 id=\"models-h\">Models and cost tables</h2>";
  Result<v1::ListModelsResponse> models = sources.costs->ListModels(v1::ListModelsRequest());
  if (!models.ok()) return (out << ErrorBox(models.status()) << "</section>").str();
  // Measured tables in the database, per model: a link per device, batch size and thread count.
  std::map<std::string, std::set<std::tuple<std::string, uint32_t, uint32_t>>> measured_on;
  std::set<std::string> measured_devices;
  for (const v1::Device& device : devices) {
    if (device.kind() == v1::Device::KIND_MEASURED) measured_devices.insert(device.name());
  }
  if (Result<std::vector<costdb::StoredCostTable>> tables = db.ListCostTables(); tables.ok()) {
    for (const costdb::StoredCostTable& t : *tables) {
      if (t.key.cost_source != profiler::kMeasuredSource || !measured_devices.contains(t.key.device)) continue;
      measured_on[t.key.model].insert({t.key.device, t.key.batch_size, t.key.threads});
    }
  }
  out << "<form class=\"pick\" action=\"/costs\" method=\"get\"><label>model <select name=\"model\">";
  for (const v1::ModelInfo& m : models->models()) {
    out << "<option>" << m.name() << "</option>";
  }
  out << "</select></label><label>device <select name=\"device\">";
  // Measured devices first, then the presets, as ListDevices orders them.
  for (const v1::Device& device : devices) {
    if (device.kind() == v1::Device::KIND_MEASURED) out << "<option>" << device.name() << "</option>";
  }
  for (const graph::BoardPreset& preset : graph::BoardPresets()) {
    out << "<option>" << preset.name << "</option>";
  }
  out << "</select></label><label>batch <input name=\"batch\" type=\"number\" min=\"1\" value=\"1\" size=\"5\"></label>"
         "<label>threads <input name=\"threads\" type=\"number\" min=\"1\" placeholder=\"all\" size=\"4\" "
         "title=\"The compute threads the table was measured at; empty: all cores of this device, or the most stored\">"
         "</label><button type=\"submit\">Show cost table</button></form>";
  out << "<div class=\"scroll\"><table id=\"model-table\"><thead><tr><th scope=\"col\">model</th>"
         "<th scope=\"col\">forward nodes</th><th scope=\"col\">training nodes</th><th scope=\"col\">parameters</th>"
         "<th scope=\"col\">activations</th><th scope=\"col\">cost tables</th></tr></thead><tbody>";
  for (const v1::ModelInfo& m : models->models()) {
    out << "<tr><th scope=\"row\">" << m.name() << "</th><td>" << m.forward_nodes() << "</td><td>" << m.training_nodes()
        << "</td><td>" << FormatBytes(static_cast<double>(m.param_bytes())) << "</td><td>"
        << FormatBytes(static_cast<double>(m.activation_bytes())) << "</td><td>";
    for (const auto& [device, batch, threads] : measured_on[m.name()]) {
      out << "<a class=\"measured\" href=\"/costs?model=" << Url(m.name()) << "&amp;device=" << Url(device)
          << "&amp;batch=" << batch;
      if (threads > 0) out << "&amp;threads=" << threads;
      out << "\">measured on " << device << ", batch " << batch
          << (threads > 0 ? ", " + profiler::ThreadsText(threads) : std::string()) << "</a> ";
    }
    out << "<a href=\"/costs?model=" << Url(m.name()) << "&amp;device=a72\">poet-flops a72</a></td></tr>";
  }
  out << "</tbody></table></div></section>";
  return out.str();
}

Markup SchedulesSection(const WebViewSources& sources) {
  HtmlWriter out;
  out << "<section id=\"schedules\" aria-labelledby=\"schedules-h\"><h2 id=\"schedules-h\">Schedules</h2>";
  Result<v1::ListSchedulesResponse> listed = sources.solver->ListSchedules(v1::ListSchedulesRequest());
  if (!listed.ok()) return (out << ErrorBox(listed.status()) << "</section>").str();
  if (listed->schedules().empty()) {
    return (out << "<p>No schedules yet: <code>edgecost solve</code> or SolverService.Solve stores them.</p></section>")
        .str();
  }
  out << "<p><a class=\"button\" id=\"schedules-csv\" href=\"/schedules.csv\" download>Download CSV</a> (a row "
         "per schedule in plain SI numbers: activation_budget_bytes, energy_j; <code>edgecost schedules --csv</code> prints "
         "the same)</p>";
  out << "<div class=\"scroll\"><table id=\"schedule-table\"><thead><tr><th scope=\"col\">#</th>"
         "<th scope=\"col\">model</th><th scope=\"col\">device</th><th scope=\"col\">strategy</th>"
         "<th scope=\"col\">budget</th><th scope=\"col\">status</th><th scope=\"col\">energy</th>"
         "<th scope=\"col\">trace</th></tr></thead><tbody>";
  for (int i = listed->schedules_size() - 1; i >= 0; --i) {  // newest first
    const v1::ScheduleSummary& s = listed->schedules(i);
    const v1::ScheduleRequest& r = s.request();
    out << "<tr";
    if (s.superseded()) out << " class=\"superseded\"";
    out << "><td><a href=\"/schedule?id=" << s.id() << "\">#" << s.id() << "</a></td><td>"
        << (r.model().empty() ? r.graph_file() : r.model()) << "</td><td>" << r.device() << "</td><td>"
        << (r.strategy().empty() ? "optimal" : r.strategy()) << "</td><td>"
        << service::BudgetAsGiven(r) << "</td><td>"
        << service::ScheduleStatusText(s.status()) << (s.superseded() ? " (superseded)" : "") << "</td>";
    // A failed request (infeasible, nothing found) has no schedule: no energy and nothing to trace.
    const bool has = s.status() == v1::Schedule::STATUS_OPTIMAL || s.status() == v1::Schedule::STATUS_FEASIBLE;
    if (has) {
      out << "<td>" << FormatJoules(s.energy_j());
      if (s.energy_source() == v1::ENERGY_SOURCE_ESTIMATED) {
        out << " <abbr class=\"estimated\" title=\"a model gave this energy, not a sensor\">ESTIMATED</abbr>";
      }
      out << "</td><td><a href=\"/trace?schedule=" << s.id() << "\">trace</a></td></tr>";
    } else {
      out << "<td class=\"none\">no schedule</td><td class=\"none\">none</td></tr>";
    }
  }
  out << "</tbody></table></div></section>";
  return out.str();
}

Markup JobsSection(const WebViewSources& sources) {
  HtmlWriter out;
  out << "<section id=\"jobs\" aria-labelledby=\"jobs-h\"><h2 id=\"jobs-h\">Jobs</h2>"
         "<p class=\"hint\" id=\"jobs-live\" aria-live=\"polite\">Progress as of this page load; with JavaScript it "
         "follows WatchEvents.</p>";
  Result<v1::ListJobsResponse> jobs = sources.jobs->ListJobs(v1::ListJobsRequest());
  if (!jobs.ok()) return (out << ErrorBox(jobs.status()) << "</section>").str();
  out << "<div class=\"scroll\"><table id=\"job-table\"><thead><tr><th scope=\"col\">#</th><th scope=\"col\">kind</th>"
         "<th scope=\"col\">state</th><th scope=\"col\">progress</th><th scope=\"col\">message</th>"
         "<th scope=\"col\">created</th></tr></thead><tbody>";
  for (int i = jobs->jobs_size() - 1; i >= 0; --i) {
    const v1::Job& job = jobs->jobs(i);
    const int percent = static_cast<int>(job.progress() * 100 + 0.5);
    out << "<tr id=\"job-" << job.id() << "\" data-job=\"" << job.id() << "\"><td>" << job.id() << "</td><td>"
        << job.kind() << "</td><td class=\"state\">" << service::JobStateText(job.state())
        << "</td><td><progress max=\"100\" value=\"" << percent << "\" aria-label=\"job " << job.id()
        << " progress\"></progress> <span class=\"percent\">" << percent << "%</span></td><td class=\"message\">"
        << job.message() << "</td><td>" << job.created_at() << "</td></tr>";
  }
  out << "</tbody></table></div>";
  if (jobs->jobs().empty()) out << "<p class=\"empty\">No jobs yet: JobService.StartProfile starts one.</p>";
  out << "</section>";
  return out.str();
}

Markup RunsSection(const WebViewSources& sources) {
  HtmlWriter out;
  out << "<section id=\"runs\" aria-labelledby=\"runs-h\"><h2 id=\"runs-h\">Profile runs</h2>";
  Result<v1::ListRunsResponse> runs = sources.traces->ListRuns(v1::ListRunsRequest());
  if (!runs.ok()) return (out << ErrorBox(runs.status()) << "</section>").str();
  if (runs->runs().empty()) return (out << "<p>No profile runs yet.</p></section>").str();
  out << "<div class=\"scroll\"><table id=\"run-table\"><thead><tr><th scope=\"col\">run</th>"
         "<th scope=\"col\">model</th><th scope=\"col\">status</th><th scope=\"col\">ops</th><th scope=\"col\">started</th>"
         "<th scope=\"col\">fingerprint</th><th scope=\"col\">trace</th></tr></thead><tbody>";
  for (const v1::ProfileRun& run : runs->runs()) {
    out << "<tr class=\"profile-run\"><td>#" << run.id() << "</td><td>"
        << (run.model().empty() ? std::string("not recorded") : run.model()) << "</td><td>" << run.status()
        << "</td><td>" << run.ops() << "</td><td>" << run.started_at() << "</td><td class=\"fingerprint\"><code>"
        << run.fingerprint_hash() << "</code></td><td>" << TraceLink(run.ops() > 0, "run", run.id(), "trace")
        << "</td></tr>";
  }
  out << "</tbody></table></div></section>";
  return out.str();
}

// Training runs (edgecost train, JobService.StartTrain), newest first: the same columns as `train --list`.
Markup TrainRunsSection(costdb::CostDb& db) {
  HtmlWriter out;
  out << "<section id=\"train-runs\" aria-labelledby=\"train-runs-h\"><h2 id=\"train-runs-h\">Training runs</h2>";
  Result<std::vector<v1::TrainRun>> runs = db.ListTrainRuns("", 100);
  if (!runs.ok()) return (out << ErrorBox(runs.status()) << "</section>").str();
  if (runs->empty()) {
    return (out << "<p>No training runs yet: <code>edgecost train</code> or JobService.StartTrain stores them.</p>"
                   "</section>")
        .str();
  }
  out << "<div class=\"scroll\"><table id=\"train-runs-table\"><caption>Per step: predicted from the cost table, "
         "measured as the median of the undisturbed steps after the first; the latest 100</caption><thead><tr>"
         "<th scope=\"col\">run</th><th scope=\"col\">model</th><th scope=\"col\">device</th>"
         "<th scope=\"col\">schedule</th><th scope=\"col\">budget</th><th scope=\"col\">steps</th>"
         // Measured over predicted in one cell: the table fits 1280 px with its budget and energy.
         "<th scope=\"col\">step time<br>(predicted)</th><th scope=\"col\">energy<br>(predicted)</th>"
         "<th scope=\"col\">peak RSS<br>(predicted)</th><th scope=\"col\">disturbed</th><th scope=\"col\">when</th>"
         "<th scope=\"col\">trace</th></tr></thead><tbody>";
  for (auto it = runs->rbegin(); it != runs->rend(); ++it) {
    const v1::TrainRun& run = *it;
    out << "<tr class=\"train-run" << (run.disturbed() ? " disturbed" : "") << "\" id=\"train-run-" << run.id()
        << "\"><td><a href=\"/train_run?id=" << run.id() << "\">#" << run.id() << "</a></td><td>" << run.model() << " b"
        << run.batch_size() << "</td><td>" << run.device() << "</td><td>" << run.strategy();
    if (run.schedule_id()) {
      out << " <a href=\"/schedule?id=" << run.schedule_id() << "\">#" << run.schedule_id() << "</a>";
    }
    // The prediction under its measurement, closing the cell: "(none)" without one.
    const auto predicted = [&out](bool known, const std::string& value) {
      out << "<br><span class=\"predicted\">(" << (known ? value : std::string("none")) << ")</span></td>";
    };
    const bool table = !run.cost_source().empty();
    out << "</td><td>" << service::BudgetAsGiven(run) << "</td><td>" << run.steps() << "</td><td>"
        << FormatSeconds(run.runtime_s());
    predicted(table, FormatSeconds(run.predicted_runtime_s()));
    out << "<td>" << FormatJoules(run.energy_j());
    if (run.energy_source() == v1::ENERGY_SOURCE_ESTIMATED) out << "<br>ESTIMATED";
    predicted(table, FormatJoules(run.predicted_energy_j()));
    out << "<td>"
        << (run.peak_rss_bytes() ? FormatBytes(static_cast<double>(run.peak_rss_bytes())) : std::string("not readable"));
    predicted(run.process_rest_from_run() != 0, FormatBytes(static_cast<double>(run.predicted_process_bytes())));
    out << "<td class=\"disturbed\">";
    if (run.disturbed()) {
      out << "<strong class=\"unreliable\" title=\"" << run.disturbance() << "\">DISTURBED " << run.disturbed_steps()
          << "/" << run.steps() - (run.steps() > 1) << "</strong>";
    } else if (run.disturbed_steps() > 0) {
      out << run.disturbed_steps() << " step" << (run.disturbed_steps() > 1 ? "s" : "");
    } else {
      out << "no";
    }
    out << "</td><td class=\"wrap when\">" << run.created_at() << "</td><td>"
        << TraceLink(!run.last_step().empty(), "train_run", run.id(), "last step") << "</td></tr>";
  }
  out << "</tbody></table></div></section>";
  return out.str();
}

}  // namespace

std::string FormValue(std::string_view query, std::string_view key) {
  auto decode = [](std::string_view text) {
    std::string out;
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] == '+') {
        out += ' ';
      } else if (text[i] == '%' && i + 2 < text.size() + 0 && std::isxdigit(static_cast<unsigned char>(text[i + 1])) &&
                 std::isxdigit(static_cast<unsigned char>(text[i + 2]))) {
        out += static_cast<char>(std::stoi(std::string(text.substr(i + 1, 2)), nullptr, 16));
        i += 2;
      } else {
        out += text[i];
      }
    }
    return out;
  };
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view pair = query.substr(0, amp);
    const size_t eq = pair.find('=');
    if (decode(pair.substr(0, eq)) == key) return eq == std::string_view::npos ? "" : decode(pair.substr(eq + 1));
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return "";
}

std::string WebSessions::Create() {
  std::random_device random;  // the kernel's entropy
  static const char* hex = "0123456789abcdef";
  std::string id;
  for (int i = 0; i < 32; ++i) {
    const unsigned byte = random() & 0xff;
    id += hex[byte >> 4];
    id += hex[byte & 15];
  }
  std::lock_guard lock(mutex_);
  ids_.push_back(id);
  if (ids_.size() > kMaxSessions) ids_.pop_front();
  return id;
}

bool WebSessions::Valid(const std::string& cookie_header) {
  const std::string prefix = std::string(kCookie) + "=";
  std::string_view rest = cookie_header;
  std::string presented;
  while (!rest.empty()) {
    const size_t semi = rest.find(';');
    std::string_view part = rest.substr(0, semi);
    while (!part.empty() && part.front() == ' ') part.remove_prefix(1);
    if (part.substr(0, prefix.size()) == prefix) presented = std::string(part.substr(prefix.size()));
    if (semi == std::string_view::npos) break;
    rest.remove_prefix(semi + 1);
  }
  if (presented.size() != 64) return false;
  std::lock_guard lock(mutex_);
  bool found = false;
  for (const std::string& id : ids_) {  // compared in full, so the time says nothing about a near miss
    unsigned char diff = 0;
    for (size_t i = 0; i < id.size(); ++i) diff |= static_cast<unsigned char>(id[i] ^ presented[i]);
    found = found || diff == 0;
  }
  return found;
}

bool WebView::Serves(const HttpRequest& request) {
  if (request.method != "GET") return false;
  const std::string path = Path(request.target);
  return path == "/" || path == "/costs" || path == "/costs.csv" || path == "/schedules.csv" || path == "/schedule" ||
         path == "/train_run" || path == "/trace" || path.starts_with("/trained/") || IsAsset(request);
}

bool WebView::IsAsset(const HttpRequest& request) {
  return request.method == "GET" && request.target.rfind("/assets/", 0) == 0;
}

HttpResponse WebView::Asset(const HttpRequest& request) {
  const web::Asset* asset = web::FindAsset(Path(request.target));
  if (!asset) return {404, "text/plain; charset=utf-8", "no such file\n"};
  HttpResponse response{200, std::string(asset->content_type), std::string(asset->body)};
  response.headers = {{"X-Content-Type-Options", "nosniff"}, {"Cache-Control", "no-cache"}};
  return response;
}

HttpResponse WebView::LoginPage(int status, std::string_view error) {
  HtmlWriter body;
  body << "<section class=\"login\" aria-labelledby=\"login-h\"><h1 id=\"login-h\">This agent needs its token</h1>"
          "<p>Over TCP every call needs the bearer token of <code>server.token_file</code>. It is asked once and kept "
          "for this browser session (as a session cookie that scripts cannot read).</p>";
  if (!error.empty()) body << "<p class=\"error\" role=\"alert\">" << error << "</p>";
  body << "<form method=\"post\" action=\"/login\"><label for=\"token\">Token</label> "
          "<input id=\"token\" name=\"token\" type=\"password\" autocomplete=\"current-password\" required autofocus> "
          "<button type=\"submit\">Open</button></form></section>";
  return Html(status, Layout("Token", body.str()));
}

HttpResponse WebView::Get(const HttpRequest& request) {
  if (IsAsset(request)) return Asset(request);
  const std::string path = Path(request.target);
  const std::string query = Query(request.target);
  if (path == "/trace") return TraceDownload(query);
  if (path.starts_with("/trained/")) return TrainedModelDownload(path);
  if (path == "/costs.csv") return CostsCsv(query);
  if (path == "/schedules.csv") return SchedulesCsv();
  if (path == "/") return Html(200, Layout("Overview", Overview()));
  Result<Markup> page = path == "/costs"       ? CostsPage(query)
                        : path == "/train_run" ? TrainRunPage(query)
                                               : SchedulePage(query);
  if (!page.ok()) {
    const int status = page.status().code() == ErrorCode::kNotFound          ? 404
                       : page.status().code() == ErrorCode::kInvalidArgument ? 400
                                                                             : 500;
    HtmlWriter body;
    body << "<h1>Cannot show this</h1>" << ErrorBox(page.status()) << "<p><a href=\"/\">Back to the overview</a></p>";
    return Html(status, Layout("Error", body.str()));
  }
  return Html(200, std::move(page).value());
}

Markup WebView::Overview() {
  HtmlWriter out;
  out << "<h1>This agent</h1>";
  Result<costdb::CostDb*> db = sources_.store->Db();
  if (!db.ok()) return ErrorBox(db.status());
  Result<v1::ListDevicesResponse> devices = sources_.costs->ListDevices(v1::ListDevicesRequest());
  std::vector<v1::Device> list;
  if (devices.ok()) list.assign(devices->devices().begin(), devices->devices().end());
  out << (devices.ok() ? DeviceSection(**db, list) : ErrorBox(devices.status())) << PowerSection(sources_)
      << ModelsSection(**db, sources_, list) << SchedulesSection(sources_) << JobsSection(sources_)
      << RunsSection(sources_) << TrainRunsSection(**db);
  return out.str();
}

namespace {
// The cost table a /costs or /costs.csv query names.
Result<v1::GetCostTableRequest> CostRequestOf(const std::string& query) {
  v1::GetCostTableRequest request;
  request.set_model(FormValue(query, "model"));
  request.set_device(FormValue(query, "device"));
  request.set_cost_source(FormValue(query, "source"));
  // The measured table's compute threads; empty: GetCostTable's default (all cores for this device).
  if (const std::string threads = FormValue(query, "threads"); !threads.empty()) {
    const unsigned long count = std::strtoul(threads.c_str(), nullptr, 10);
    if (count == 0 || count > 4096) return InvalidArgument("threads is a count of compute threads, 1 to 4096");
    request.set_threads(static_cast<uint32_t>(count));
  }
  if (const std::string batch = FormValue(query, "batch"); !batch.empty()) {
    const unsigned long size = std::strtoul(batch.c_str(), nullptr, 10);
    if (size == 0 || size > 1u << 20) return InvalidArgument("batch is the batch size, 1 to 1048576");
    request.set_batch_size(static_cast<uint32_t>(size));
  }
  if (request.model().empty()) return InvalidArgument("say which model: /costs?model=NAME&device=DEVICE");
  return request;
}
}  // namespace

HttpResponse WebView::CostsCsv(const std::string& query) {
  Result<v1::GetCostTableRequest> request = CostRequestOf(query);
  Result<v1::CostTable> table = request.ok() ? sources_.costs->GetCostTable(*request) : Result<v1::CostTable>(request.status());
  if (!table.ok()) {
    return {table.status().code() == ErrorCode::kNotFound ? 404 : 400, "text/plain; charset=utf-8",
            table.status().message() + "\n"};
  }
  std::string name = table->graph().model() + "." + table->device() + "." + table->cost_source();
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') c = '_';
  }
  HttpResponse response{200, "text/csv; charset=utf-8", service::CostTableCsv(*table)};
  response.headers = {{"Content-Disposition", "attachment; filename=\"" + name + ".csv\""},
                      {"X-Content-Type-Options", "nosniff"}};
  return response;
}

HttpResponse WebView::SchedulesCsv() {
  Result<v1::ListSchedulesResponse> listed = sources_.solver->ListSchedules(v1::ListSchedulesRequest());
  if (!listed.ok()) return {500, "text/plain; charset=utf-8", listed.status().message() + "\n"};
  HttpResponse response{200, "text/csv; charset=utf-8", service::SchedulesCsv(*listed)};
  response.headers = {{"Content-Disposition", "attachment; filename=\"schedules.csv\""},
                      {"X-Content-Type-Options", "nosniff"}};
  return response;
}

Result<Markup> WebView::CostsPage(const std::string& query) {
  EC_ASSIGN_OR_RETURN(const v1::GetCostTableRequest request, CostRequestOf(query));
  EC_ASSIGN_OR_RETURN(v1::CostTable table, sources_.costs->GetCostTable(request));
  const bool measured = table.cost_source() == profiler::kMeasuredSource;
  std::string compare = FormValue(query, "compare");
  if (compare.empty()) compare = "a72";
  // poet-flops on a preset, for the same graph, beside measured costs.
  std::optional<v1::CostTable> estimate;
  std::string estimate_error;
  if (measured) {
    v1::GetCostTableRequest poet = request;
    poet.set_device(compare);
    poet.set_cost_source(std::string(graph::kPoetFlopsSource));
    poet.set_derivation(table.graph().derivation());
    Result<v1::CostTable> e = sources_.costs->GetCostTable(poet);
    if (e.ok() && e->costs_size() == table.costs_size()) {
      estimate = std::move(e).value();
    } else {
      estimate_error = e.ok() ? "its graph differs" : e.status().message();
    }
  }
  // 95% intervals of measured runtimes, from the op costs behind the table.
  std::map<std::string, v1::RuntimeStats> intervals;
  std::map<std::string, std::string> unreliable;  // op key -> why it could not be measured cleanly
  if (measured) {
    EC_ASSIGN_OR_RETURN(costdb::CostDb * db, sources_.store->Db());
    EC_ASSIGN_OR_RETURN(std::vector<v1::OpCost> ops, db->ListOpCosts(table.fingerprint_hash()));
    for (const v1::OpCost& op : ops) {
      intervals[op.signature().key()] = op.runtime();
      if (op.unreliable()) unreliable[op.signature().key()] = op.unreliable_reason();
    }
  }
  double max_s = 0, max_j = 0, max_bytes = 0, total_s = 0, total_j = 0;
  for (const v1::NodeCost& c : table.costs()) {
    auto it = intervals.find(c.op_key());
    max_s = std::max({max_s, c.runtime_s(), it != intervals.end() ? it->second.ci95_high_s() : 0.0});
    max_j = std::max(max_j, c.compute_j());
    max_bytes = std::max(max_bytes, static_cast<double>(c.ram_bytes()));
    total_s += c.runtime_s();
    total_j += c.compute_j();
  }
  if (estimate) {
    for (const v1::NodeCost& c : estimate->costs()) {
      max_s = std::max(max_s, c.runtime_s());
      max_j = std::max(max_j, c.compute_j());
    }
  }
  // Sorted on the server, so the order holds without JavaScript; app.js sorts in place.
  const std::string sort = FormValue(query, "sort");
  std::vector<int> order(static_cast<size_t>(table.costs_size()));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  auto key = [&](int i) -> double {
    const v1::NodeCost& c = table.costs(i);
    if (sort == "runtime") return -c.runtime_s();
    if (sort == "energy") return -c.compute_j();
    if (sort == "memory") return -static_cast<double>(c.ram_bytes());
    return i;
  };
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return key(a) < key(b); });

  const v1::TrainingGraph& g = table.graph();
  // The table's own query, which the sort links and the CSV link repeat (text: written, & becomes &amp;).
  const std::string table_query = "model=" + Url(request.model()) + "&device=" + Url(table.device()) +
                                  (request.cost_source().empty() ? "" : "&source=" + Url(request.cost_source())) +
                                  "&batch=" + std::to_string(table.graph().batch_size()) +
                                  (table.threads() > 0 ? "&threads=" + std::to_string(table.threads()) : "");
  const std::string base = "/costs?" + table_query + (measured ? "&compare=" + Url(compare) : "");
  auto header = [&](std::string_view id, std::string_view label, std::string_view type) {
    HtmlWriter th;
    th << "<th scope=\"col\" data-sort=\"" << type << "\"";
    if (sort == id || (sort.empty() && id == "node")) {
      th << " aria-sort=\"" << (id == "node" ? "ascending" : "descending") << "\"";
    }
    return (th << "><a href=\"" << base << "&amp;sort=" << id << "\">" << label << "</a></th>").str();
  };
  HtmlWriter out;
  out << "<h1>" << g.model() << " on " << table.device() << "</h1>"
      << "<dl class=\"facts\"><dt>cost source</dt><dd>" << table.cost_source() << (measured ? "" : " (estimated)")
      << "</dd><dt>graph</dt><dd>" << g.nodes_size() << " nodes, derivation " << g.derivation() << ", trainable "
      << g.trainable() << ", batch size " << g.batch_size() << "</dd><dt>training step</dt><dd>"
      << FormatSeconds(total_s) << ", " << FormatJoules(total_j)
      << " (every node once: the floor of any schedule)</dd>";
  if (!table.note().empty()) out << "<dt>note</dt><dd>" << table.note() << "</dd>";
  if (measured) {
    out << "<dt>beside it</dt><dd>"
        << (estimate ? "poet-flops on " + compare + " for the same graph" : "no poet-flops estimate: " + estimate_error)
        << "</dd>";
  }
  out << "</dl>";
  out << "<p><a class=\"button\" id=\"costs-csv\" href=\"/costs.csv?" << table_query << "\" download>Download CSV</a> (a row per node in plain SI numbers: runtime_s, compute_j, ram_bytes; "
         "<code>edgecost costs --csv</code> prints the same)</p>";
  out << "<div class=\"scroll\"><table id=\"cost-table\" class=\"costs sortable\"><caption>Cost per node"
      << (measured ? "; runtime bars show the 95% interval of the median" : "") << "</caption><thead><tr>"
      << header("node", "#", "number") << "<th scope=\"col\">name</th><th scope=\"col\">phase</th>"
      << header("runtime", "runtime", "number") << header("energy", "energy", "number")
      << header("memory", "memory", "number");
  if (estimate) out << "<th scope=\"col\">poet-flops runtime</th><th scope=\"col\">poet-flops energy</th>";
  out << "</tr></thead><tbody>";
  for (int i : order) {
    const v1::NodeCost& c = table.costs(i);
    const v1::TrainingNode& node = g.nodes(i);
    std::optional<std::pair<double, double>> ci;
    std::string ci_text;
    if (auto it = intervals.find(c.op_key()); it != intervals.end()) {
      ci = std::make_pair(it->second.ci95_low_s(), it->second.ci95_high_s());
      ci_text = " (95%: " + FormatSeconds(ci->first) + " to " + FormatSeconds(ci->second) +
                ", n=" + std::to_string(it->second.repetitions()) + ")";
    }
    out << "<tr class=\"node\"><td data-value=\"" << i << "\">" << i << "</td><td class=\"wrap name\">" << node.name()
        << "</td><td>" << PhaseText(node.phase()) << "</td><td data-value=\"" << c.runtime_s() << "\">"
        << Bar(c.runtime_s(), max_s, ci, "runtime") << " <span title=\"" << ci_text << "\">"
        << FormatSeconds(c.runtime_s()) << "</span>";
    if (auto why = unreliable.find(c.op_key()); why != unreliable.end()) {
      out << " <strong class=\"unreliable\" title=\"" << why->second << "\">unreliable</strong>";
    }
    out << "</td><td data-value=\"" << c.compute_j() << "\">" << Bar(c.compute_j(), max_j, std::nullopt, "energy")
        << " " << FormatJoules(c.compute_j()) << "</td><td data-value=\"" << c.ram_bytes() << "\">"
        << Bar(static_cast<double>(c.ram_bytes()), max_bytes, std::nullopt, "memory") << " "
        << FormatBytes(static_cast<double>(c.ram_bytes())) << "</td>";
    if (estimate) {
      const v1::NodeCost& e = estimate->costs(i);
      out << "<td data-value=\"" << e.runtime_s() << "\">" << Bar(e.runtime_s(), max_s, std::nullopt, "estimate") << " "
          << FormatSeconds(e.runtime_s()) << "</td><td data-value=\"" << e.compute_j() << "\">"
          << Bar(e.compute_j(), max_j, std::nullopt, "estimate") << " " << FormatJoules(e.compute_j()) << "</td>";
    }
    out << "</tr>";
  }
  out << "</tbody></table></div>";
  return Layout(g.model() + " on " + table.device(), out.str());
}

Result<Markup> WebView::SchedulePage(const std::string& query) {
  const std::string id_text = FormValue(query, "id");
  uint64_t id = 0;
  if (id_text.empty() || id_text.size() > 18 || id_text.find_first_not_of("0123456789") != std::string::npos ||
      (id = std::stoull(id_text)) == 0) {
    return InvalidArgument("say which schedule: /schedule?id=N, N from the overview's list");
  }
  EC_ASSIGN_OR_RETURN(costdb::CostDb * db, sources_.store->Db());
  EC_ASSIGN_OR_RETURN(service::StoredScheduleView view, service::LoadStoredSchedule(*db, static_cast<int64_t>(id)));
  const v1::Schedule& s = view.schedule;
  const v1::ScheduleRequest& r = s.request();
  const bool has = s.status() == v1::Schedule::STATUS_OPTIMAL || s.status() == v1::Schedule::STATUS_FEASIBLE;
  const std::string title = "Schedule #" + std::to_string(id);
  HtmlWriter out;
  out << "<h1>" << title << ": " << (r.model().empty() ? r.graph_file() : r.model()) << " on " << view.table.device()
      << "</h1><dl class=\"facts\"><dt>status</dt><dd>" << service::ScheduleStatusText(s.status());
  if (s.status() == v1::Schedule::STATUS_FEASIBLE) {
    out << ": <span class=\"term\" title=\"" << service::kUnprovenMeaning << "\">" << service::GapText(s) << "</span>";
  }
  out << "</dd>";
  if (!s.message().empty()) {
    std::string meaning;  // the terms of the message, one sentence each, as a tooltip
    if (s.message().find("eviction bound") != std::string::npos) meaning += service::kEvictionBoundMeaning;
    if (s.message().find("root LP") != std::string::npos) {
      meaning += (meaning.empty() ? "" : " ") + std::string(service::kRootLpMeaning);
    }
    out << "<dt>message</dt><dd";
    if (!meaning.empty()) out << " class=\"term\" title=\"" << meaning << "\"";
    out << ">" << s.message() << "</dd>";
  }
  out << "<dt>strategy</dt><dd>" << s.strategy() << "</dd>";
  if (s.request().process_ram_budget_bytes() > 0) {
    out << "<dt>RAM budget</dt><dd>" << FormatBytes(static_cast<double>(s.request().process_ram_budget_bytes()))
        << " for the training process's peak RSS; what its fixed parts leave is the activation budget</dd>";
  }
  out << "<dt>activations</dt><dd>peak " << FormatBytes(static_cast<double>(s.peak_ram_bytes())) << " of a "
      << FormatBytes(static_cast<double>(s.activation_budget_bytes())) << " activation budget"
      << (s.request().activation_budget_percent() > 0
              ? " (" + service::PercentText(s.request().activation_budget_percent()) +
                    " of the plain step's activation peak)"
              : std::string())
      << "</dd><dt>runtime</dt><dd>"
      << FormatSeconds(s.runtime_s()) << " of a " << FormatSeconds(s.runtime_budget_s()) << " budget</dd>";
  if (has) {
    const v1::EnergyBreakdown& e = s.energy();
    out << "<dt>energy</dt><dd>" << FormatJoules(e.total_j())
        << (s.energy_source() == v1::ENERGY_SOURCE_ESTIMATED ? " ESTIMATED" : "") << " = compute "
        << FormatJoules(e.compute_j())
        << " + recompute " << FormatJoules(e.recompute_j()) << " + page-in " << FormatJoules(e.page_in_j())
        << " + page-out " << FormatJoules(e.page_out_j()) << "</dd><dt>lower bound</dt><dd>"
        << FormatJoules(s.lower_bound_j()) << " (floor " << FormatJoules(s.floor_j()) << ")</dd><dt>operations</dt><dd>"
        << service::OperationsText(s.recomputations(), s.page_outs(), s.page_ins()) << "</dd><dt>updates</dt><dd>"
        << service::UpdatesText(s) << "</dd>";
  }
  out << "<dt>cost source</dt><dd>" << view.table.cost_source() << "</dd></dl>";
  if (!has) return Layout(title, (out << "<p>This request has no schedule to show.</p>").str());
  if (!view.replay.valid) {
    out << "<p class=\"error\" role=\"alert\">The stored schedule does not replay on its cost table: "
        << view.replay.violation << "</p>";
    return Layout(title, out.str());
  }
  out << "<p><a class=\"button\" href=\"/trace?schedule=" << id
      << "\" download>Download the predicted timeline</a> (Chrome Trace Event JSON: open it in Perfetto UI or "
         "chrome://tracing)</p>";
  out << "<section aria-labelledby=\"picture-h\"><h2 id=\"picture-h\">The picture</h2><figure class=\"picture\" "
         "id=\"schedule-picture\">"
      << solver::ScheduleToSvg(view.problem, s)
      << "<figcaption>Stages down, nodes across; below, RAM in use over the predicted step against the budget, with "
         "the forward/backward boundary.</figcaption></figure></section>";
  out << "<section aria-labelledby=\"plan-h\"><h2 id=\"plan-h\">The plan in words</h2>";
  Result<solver::PlanExplanation> plan = solver::ExplainPlan(view.problem, s);
  if (!plan.ok()) {
    out << ErrorBox(plan.status());
  } else {
    out << "<pre class=\"words\">" << solver::PlanInWords(*plan) << "</pre>";
  }
  out << "</section><section aria-labelledby=\"measured-h\"><h2 id=\"measured-h\">Predicted against measured</h2>";
  // Training runs of this schedule (edgecost train, JobService.StartTrain), newest last.
  Result<std::vector<v1::TrainRun>> runs = db->ListTrainRuns(r.model(), 100);
  std::vector<v1::TrainRun> mine;
  if (runs.ok()) {
    for (v1::TrainRun& run : *runs) {
      if (run.schedule_id() == id) mine.push_back(std::move(run));
    }
  }
  if (!runs.ok()) {
    out << ErrorBox(runs.status());
  } else if (mine.empty()) {
    out << "<p>No measured training run of this schedule is stored yet (<code>edgecost train --schedule-id " << id
        << "</code> makes one); the figures above are predictions from the cost table.</p>";
  } else {
    out << "<div class=\"scroll\"><table id=\"train-run-table\"><caption>Per step: predicted from the cost table, "
           "measured as the median of the steps after the first</caption><thead><tr><th scope=\"col\">run</th>"
           "<th scope=\"col\">steps</th><th scope=\"col\">runtime predicted</th><th scope=\"col\">measured</th>"
           "<th scope=\"col\">peak predicted</th><th scope=\"col\">measured</th>"
           "<th scope=\"col\">energy predicted</th><th scope=\"col\">measured</th>"
           "<th scope=\"col\">paging wait</th><th scope=\"col\">when</th><th scope=\"col\">trace</th></tr></thead>"
           "<tbody>";
    for (const v1::TrainRun& run : mine) {
      out << "<tr><td><a href=\"/train_run?id=" << run.id() << "\">#" << run.id() << "</a></td><td>" << run.steps()
          << "</td><td>" << FormatSeconds(run.predicted_runtime_s()) << "</td><td>" << FormatSeconds(run.runtime_s())
          << "</td><td>" << FormatBytes(static_cast<double>(run.predicted_peak_bytes())) << "</td><td>"
          << FormatBytes(static_cast<double>(run.peak_activation_bytes())) << "</td><td>"
          << FormatJoules(run.predicted_energy_j()) << "</td><td>" << FormatJoules(run.energy_j())
          << (run.energy_source() == v1::ENERGY_SOURCE_ESTIMATED ? " (estimated)" : "") << "</td><td>"
          << FormatSeconds(run.paging_wait_s()) << "</td><td>" << run.created_at() << "</td><td>"
          << TraceLink(!run.last_step().empty(), "train_run", run.id(), "last step") << "</td></tr>";
    }
    out << "</tbody></table></div>";
  }
  out << "</section>";
  return Layout(title, out.str());
}

namespace {
// A run on a user's data set: each epoch's training loss, and the held-out part's after it.
Markup EpochTable(const v1::TrainRun& run) {
  if (run.epochs_size() == 0) return {};
  const bool held_out = run.held_out_records() > 0;
  HtmlWriter out;
  out << "<section aria-labelledby=\"epochs-h\"><h2 id=\"epochs-h\">Epochs</h2><div class=\"scroll\">"
      << "<table id=\"epoch-table\"><caption>" << run.batches_per_epoch() << " batches per epoch"
      << (held_out ? "; held out: " + std::to_string(run.held_out_records()) +
                         " records, batch norm on its running statistics"
                   : std::string("; no records held out (--val-split or --val-data)"))
      << "</caption><thead><tr><th scope=\"col\">epoch</th><th scope=\"col\">steps</th>"
      << "<th scope=\"col\">training loss</th>"
      << (held_out ? Markup("<th scope=\"col\">held-out loss</th><th scope=\"col\">held-out accuracy</th>") : Markup())
      << "</tr></thead><tbody>";
  for (const v1::EpochStats& epoch : run.epochs()) {
    out << "<tr><th scope=\"row\">" << epoch.epoch() << "</th><td>" << epoch.steps() << "</td><td>"
        << Loss(epoch.train_loss()) << "</td>";
    if (held_out) {
      out << "<td>" << Loss(epoch.held_out_loss()) << "</td><td>" << Fixed(100 * epoch.held_out_accuracy(), 1)
          << "%</td>";
    }
    out << "</tr>";
  }
  out << "</tbody></table></div></section>";
  return out.str();
}
}  // namespace

// One training run: what was predicted and measured, and its loss and step time over the steps.
Result<Markup> WebView::TrainRunPage(const std::string& query) {
  const std::string id_text = FormValue(query, "id");
  uint64_t id = 0;
  if (id_text.empty() || id_text.size() > 18 || id_text.find_first_not_of("0123456789") != std::string::npos ||
      (id = std::stoull(id_text)) == 0) {
    return InvalidArgument("say which training run: /train_run?id=N, N from the overview's list");
  }
  EC_ASSIGN_OR_RETURN(costdb::CostDb * db, sources_.store->Db());
  EC_ASSIGN_OR_RETURN(v1::TrainRun run, db->GetTrainRun(static_cast<int64_t>(id)));
  run.set_id(id);
  const bool predicted = !run.cost_source().empty();
  HtmlWriter out;
  out << "<h1>Training run #" << id << ": " << run.model() << " on " << run.device()
      << "</h1><dl class=\"facts\"><dt>schedule</dt><dd>" << run.strategy();
  if (run.schedule_id()) out << " <a href=\"/schedule?id=" << run.schedule_id() << "\">#" << run.schedule_id() << "</a>";
  out << "</dd><dt>steps</dt><dd>" << run.steps() << " of " << service::DescribeTraining(run) << ", batch "
      << run.batch_size() << ", " << profiler::ThreadsText(run.threads()) << ", " << run.data() << "</dd>"
      << "<dt>step time</dt><dd>" << FormatSeconds(run.runtime_s()) << " measured"
      << (predicted
              ? ", " + FormatSeconds(run.predicted_runtime_s()) + " predicted from " + run.cost_source() + " costs"
              : std::string())
      << "</dd><dt>process memory</dt><dd>"
      << (run.peak_rss_bytes() > 0 ? FormatBytes(static_cast<double>(run.peak_rss_bytes())) + " peak (VmHWM)"
                                   : std::string("not readable here"))
      << (run.predicted_process_bytes() > 0
              ? ", " + FormatBytes(static_cast<double>(run.predicted_process_bytes())) + " predicted"
              : std::string())
      << "</dd><dt>peak activations</dt><dd>" << FormatBytes(static_cast<double>(run.peak_activation_bytes()))
      << " measured, " << FormatBytes(static_cast<double>(run.predicted_peak_bytes())) << " planned</dd>"
      << "<dt>energy</dt><dd>" << FormatJoules(run.energy_j()) << " per step"
      << (run.energy_source() == v1::ENERGY_SOURCE_ESTIMATED ? " ESTIMATED by " : " measured by ") << run.energy_probe()
      << "</dd><dt>loss</dt><dd>" << Loss(run.first_loss()) << " at step 1, " << Loss(run.last_loss())
      << " at the last</dd>";
  if (run.disturbed()) {
    out << "<dt>disturbed</dt><dd><strong class=\"unreliable\">DISTURBED</strong> " << run.disturbance() << "</dd>";
  }
  out << "<dt>when</dt><dd>" << run.created_at() << "</dd></dl>";
  if (!run.last_step().empty()) {
    out << "<p><a class=\"button\" href=\"/trace?train_run=" << id
        << "\" download>Download the last step's trace</a> (Chrome Trace Event JSON: open it in Perfetto UI)</p>";
  }
  if (!run.trained_onnx_path().empty() &&
      std::filesystem::path(run.trained_onnx_path()).parent_path() == TrainedModelDir(sources_.store->path())) {
    out << "<p><a class=\"button\" href=\"/trained/" << id << ".onnx\" download>Download the trained model</a> "
        << "(ONNX) and <a href=\"/trained/" << id << ".npz\" download>its state dict</a> (NumPy .npz, for "
        << "<code>load_state_dict</code>)</p>";
  }
  out << EpochTable(run);
  out << "<section aria-labelledby=\"plot-h\"><h2 id=\"plot-h\">Loss and step time over the run</h2>"
         "<figure class=\"picture\" id=\"train-run-plot\">"
      << service::TrainRunSvg(run)
      << "<figcaption>Each step's loss and time; <code>edgecost train --svg FILE</code> draws the same."
         "</figcaption></figure></section>";
  return Layout("Training run #" + std::to_string(id), out.str());
}

// GET /trained/<run id>.onnx or .npz: a trained model a train job kept (keep_model). Only files in
// this agent's own store are served, whatever path a local run recorded.
HttpResponse WebView::TrainedModelDownload(const std::string& path) {
  const std::string name = path.substr(std::string("/trained/").size());
  const size_t dot = name.find('.');
  const std::string id_text = name.substr(0, dot), extension = dot == std::string::npos ? "" : name.substr(dot);
  if (id_text.empty() || id_text.size() > 18 || id_text.find_first_not_of("0123456789") != std::string::npos ||
      (extension != ".onnx" && extension != ".npz")) {
    return {400, "text/plain; charset=utf-8", "ask for /trained/N.onnx or /trained/N.npz, N a training run\n"};
  }
  const int64_t id = static_cast<int64_t>(std::stoull(id_text));
  Result<costdb::CostDb*> db = sources_.store->Db();
  Result<v1::TrainRun> run = db.ok() ? (*db)->GetTrainRun(id) : Result<v1::TrainRun>(db.status());
  if (!run.ok()) {
    return {run.status().code() == ErrorCode::kNotFound ? 404 : 500, "text/plain; charset=utf-8",
            run.status().message() + "\n"};
  }
  const std::string& file = extension == ".onnx" ? run->trained_onnx_path() : run->trained_npz_path();
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::path store = fs::weakly_canonical(TrainedModelDir(sources_.store->path()), error);
  const fs::path resolved = file.empty() ? fs::path() : fs::weakly_canonical(file, error);
  if (file.empty() || resolved.parent_path() != store) {
    return {404, "text/plain; charset=utf-8",
            "training run #" + id_text +
                " kept no model here (a train job of an ONNX model keeps it with keep_model: "
                "`edgecost --remote ... train --out FILE`)\n"};
  }
  std::ifstream in(resolved, std::ios::binary);
  if (!in) return {404, "text/plain; charset=utf-8", "the trained model's file is gone\n"};
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  HttpResponse response{200, "application/octet-stream", std::move(bytes)};
  response.headers = {{"Content-Disposition", "attachment; filename=\"train-run-" + id_text + extension + "\""},
                      {"X-Content-Type-Options", "nosniff"}};
  return response;
}

HttpResponse WebView::TraceDownload(const std::string& query) {
  v1::GetTraceRequest request;
  const std::string schedule = FormValue(query, "schedule"), run = FormValue(query, "run"),
                    train_run = FormValue(query, "train_run");
  const std::string& id = !schedule.empty() ? schedule : !run.empty() ? run : train_run;
  if (id.empty() || id.size() > 18 || id.find_first_not_of("0123456789") != std::string::npos) {
    return {400, "text/plain; charset=utf-8",
            "say what to trace: /trace?schedule=N, /trace?run=N or /trace?train_run=N\n"};
  }
  if (!schedule.empty()) {
    request.set_schedule_id(std::stoull(id));
  } else if (!run.empty()) {
    request.set_run_id(std::stoull(id));
  } else {
    request.set_train_run_id(std::stoull(id));
  }
  const char* file = !schedule.empty() ? "schedule-" : !run.empty() ? "run-" : "train-run-";
  Result<v1::Trace> trace = sources_.traces->GetTrace(request);
  if (!trace.ok()) {
    return {trace.status().code() == ErrorCode::kNotFound ? 404 : 400, "text/plain; charset=utf-8",
            trace.status().message() + "\n"};
  }
  HttpResponse response{200, "application/json", trace->trace_json()};
  response.headers = {{"Content-Disposition", "attachment; filename=\"" + std::string(file) + id + ".trace.json\""},
                      {"X-Content-Type-Options", "nosniff"}};
  return response;
}

}  // namespace edgecost::daemon
