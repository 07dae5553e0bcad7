#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>

#include <nlohmann/json.hpp>

#include "base/units.h"
#include "cli/cli.h"
#include "cli/graph_flags.h"
#include "cli/table.h"
#include "costdb/costdb.h"
#include "costdb/postgres.h"
#include "daemon/client.h"
#include "graph/cost_source.h"
#include "graph/derive.h"
#include "graph/graph_io.h"
#include "profiler/profile.h"
#include "service/cost_tables.h"
#include "service/models.h"
#include "service/step_memory.h"
#include "service/train_job.h"  // kMeasuredInStepSource

namespace edgecost::cli {
namespace {

struct CostsFlags {
  GraphFlags graph;
  std::string platform = "a72";
  std::string source = std::string(graph::kPoetFlopsSource);
  bool json = false;
  bool csv = false;
  bool store = false;
  bool summary = false;
  bool counters = false;
  bool domains = false;
  std::string out_path;
  std::string device;
  int threads = 0;  // compute threads of the measured table; 0: service::ResolveCostTable's default
  CLI::Option* source_option = nullptr;  // given: with --device, measured or measured-in-step
};

// With --device: the measured table, or the measured-in-step one when --source asks for it.
bool InStep(const CostsFlags& flags) { return flags.source == service::kMeasuredInStepSource; }

struct Totals {
  int forward = 0, loss = 0, backward = 0;
  double runtime_s = 0, compute_j = 0, page_in_j = 0, page_out_j = 0;
  uint64_t largest_bytes = 0;
};

Totals Sum(const v1::CostTable& table) {
  Totals t;
  for (int i = 0; i < table.costs_size(); ++i) {
    const v1::NodeCost& cost = table.costs(i);
    const v1::Phase phase = table.graph().nodes(i).phase();
    (phase == v1::PHASE_BACKWARD ? t.backward : phase == v1::PHASE_LOSS ? t.loss : t.forward)++;
    t.runtime_s += cost.runtime_s();
    t.compute_j += cost.compute_j();
    t.page_in_j += cost.page_in_j();
    t.page_out_j += cost.page_out_j();
    t.largest_bytes = std::max<uint64_t>(t.largest_bytes, cost.ram_bytes());
  }
  return t;
}

void PrintSummary(const v1::CostTable& table, const Totals& t) {
  const v1::TrainingGraph& g = table.graph();
  std::cout << "model          " << g.model() << " (derivation " << g.derivation() << ", trainable " << g.trainable()
            << ", batch size " << g.batch_size() << ")\n"
            << "device         " << table.device() << ", cost source " << table.cost_source()
            << (table.threads() > 0 ? ", measured at " + profiler::ThreadsText(table.threads()) : "") << "\n";
  if (!table.note().empty()) std::cout << "               " << table.note() << "\n";
  std::cout << "nodes          " << g.nodes_size() << " (" << t.forward << " forward, " << t.loss << " loss, "
            << t.backward << " backward)\n"
            << "training step  " << FormatSeconds(t.runtime_s) << ", " << EnergyText(t.compute_j, table.energy_source())
            << " (every node computed once: the energy floor of any schedule)\n"
            << "activations    " << FormatBytes(static_cast<double>(graph::ActivationBytes(g)))
            << " of forward and loss outputs, "
            << "largest single output " << FormatBytes(static_cast<double>(t.largest_bytes)) << "\n"
            << "parameters     " << FormatBytes(static_cast<double>(g.param_bytes()))
            << " (outside the activation budget)\n";
  PrintStepMemory(table.memory());
  std::cout << "paging         every output once: out " << FormatJoules(t.page_out_j) << ", in "
            << FormatJoules(t.page_in_j) << "\n";
}

std::string EnergyHeader(const v1::CostTable& table) {
  return table.energy_source() == v1::ENERGY_SOURCE_ESTIMATED ? "energy ESTIMATED" : "energy";
}

// Relative width of a measured op's 95% interval above which the summary names it.
constexpr double kWideInterval = 0.10;

std::string Interval(const v1::RuntimeStats& r) {
  if (r.repetitions() == 0) return "";
  return FormatSeconds(r.ci95_low_s()) + " .. " + FormatSeconds(r.ci95_high_s());
}

// What a measured table's figures are worth: the ops stored as unreliable and
// those whose interval is wide, each op named once.
void PrintUncertainty(const v1::CostTable& table) {
  std::map<std::string, std::pair<std::string, const v1::NodeCost*>> unreliable, wide;  // op -> first node
  for (int i = 0; i < table.costs_size(); ++i) {
    const v1::NodeCost& c = table.costs(i);
    if (c.op_key().empty()) continue;
    const std::string& name = table.graph().nodes(i).name();
    if (c.unreliable()) unreliable.emplace(c.op_key(), std::make_pair(name, &c));
    const v1::RuntimeStats& r = c.runtime_stats();
    if (r.median_s() > 0 && (r.ci95_high_s() - r.ci95_low_s()) / r.median_s() > kWideInterval) {
      wide.emplace(c.op_key(), std::make_pair(name, &c));
    }
  }
  if (!unreliable.empty()) {
    std::cout << "unreliable     " << unreliable.size()
              << " ops measured while the device was busy (re-run `edgecost profile` when it is idle):\n";
    for (const auto& [key, node] : unreliable) {
      std::cout << "               " << node.first << " (" << key << "): " << node.second->unreliable_reason() << "\n";
    }
  }
  if (!wide.empty()) {
    std::cout << "wide interval  " << wide.size() << " ops whose 95% interval exceeds " << kWideInterval * 100
              << "% of the median:\n";
    for (const auto& [key, node] : wide) {
      const v1::RuntimeStats& r = node.second->runtime_stats();
      char share[16];
      std::snprintf(share, sizeof share, "%.0f%%", 100 * (r.ci95_high_s() - r.ci95_low_s()) / r.median_s());
      std::cout << "               " << node.first << " (" << key << "): " << Interval(r) << ", " << share << "\n";
    }
  }
  if (unreliable.empty() && wide.empty())
    std::cout << "uncertainty    every op measured cleanly, intervals within " << kWideInterval * 100
              << "% of the median\n";
}

void PrintNodeTable(const v1::CostTable& table, const Totals& t) {
  // Measured tables carry each op's spread and interval: shown when there.
  bool stats = false;
  for (const v1::NodeCost& c : table.costs()) stats = stats || c.runtime_stats().repetitions() > 0;
  std::vector<Table::Column> columns = {{"#"}, {"name", Table::Align::kLeft}, {"runtime"}};
  if (stats) columns.insert(columns.end(), {{"spread"}, {"95% interval"}});
  columns.insert(columns.end(), {{EnergyHeader(table)}, {"output"}, {"page-in"}, {"page-out"}});
  Table out(columns);
  for (int i = 0; i < table.costs_size(); ++i) {
    const v1::NodeCost& c = table.costs(i);
    std::vector<std::string> row = {std::to_string(i), table.graph().nodes(i).name(),
                                    FormatSeconds(c.runtime_s()) + (c.unreliable() ? " !" : "")};
    if (stats) {
      row.push_back(c.runtime_stats().repetitions() ? FormatSeconds(c.runtime_stats().stddev_s()) : "");
      row.push_back(Interval(c.runtime_stats()));
    }
    row.insert(row.end(), {FormatJoules(c.compute_j()), FormatBytes(static_cast<double>(c.ram_bytes())),
                           FormatJoules(c.page_in_j()), FormatJoules(c.page_out_j())});
    out.AddRow(row);
  }
  out.AddRule();
  std::vector<std::string> total = {"", "total", FormatSeconds(t.runtime_s)};
  if (stats) total.insert(total.end(), {"", ""});
  total.insert(total.end(), {FormatJoules(t.compute_j), "", FormatJoules(t.page_in_j), FormatJoules(t.page_out_j)});
  out.AddRow(total);
  out.Print(std::cout);
  std::cout << "\n";
}

// "1.23 M": a count per execution, readable.
std::string FormatCount(double n) {
  const char* suffix[] = {"", " k", " M", " G", " T"};
  int i = 0;
  while (std::fabs(n) >= 1000 && i < 4) {
    n /= 1000;
    ++i;
  }
  char text[32];
  std::snprintf(text, sizeof text, "%.3g%s", n, suffix[i]);
  return text;
}

// Each node's performance counters per execution, one column per event, then
// what the device could not count, said once.
void PrintCounters(const v1::CostTable& table) {
  std::vector<std::string> events;
  for (const v1::NodeCost& c : table.costs()) {
    for (const v1::OpCounter& counter : c.counters()) {
      if (std::find(events.begin(), events.end(), counter.event()) == events.end()) events.push_back(counter.event());
    }
  }
  if (events.empty()) {
    std::cout << "counters       none stored for this table (measured before counters were read, or none opened "
                 "here): run `edgecost profile --force` to measure them\n";
  } else {
    std::vector<Table::Column> columns = {{"#"}, {"name", Table::Align::kLeft}, {"runtime"}};
    for (const std::string& e : events) columns.push_back({e == "task-clock" ? "task-clock (CPU time)" : e});
    Table out(columns);
    bool multiplexed = false;
    for (int i = 0; i < table.costs_size(); ++i) {
      const v1::NodeCost& c = table.costs(i);
      if (c.op_key().empty()) continue;
      std::vector<std::string> row = {std::to_string(i), table.graph().nodes(i).name(), FormatSeconds(c.runtime_s())};
      for (const std::string& e : events) {
        auto it = std::find_if(c.counters().begin(), c.counters().end(),
                               [&](const v1::OpCounter& counter) { return counter.event() == e; });
        if (it == c.counters().end()) {
          row.push_back("-");  // not counted for this op: never a zero
          continue;
        }
        const bool scaled = it->running_fraction() < 0.999;
        multiplexed = multiplexed || scaled;
        row.push_back(
            (e == "task-clock" ? FormatSeconds(1e-9 * it->per_execution()) : FormatCount(it->per_execution())) +
            (scaled ? " ~" : ""));
      }
      out.AddRow(row);
    }
    out.Print(std::cout);
    std::cout << "(per execution, over each op's timed window"
              << (multiplexed ? "; ~ scaled up from the share of the window the PMU counted it" : "") << ")\n";
  }
  // Events that fail alike (no PMU) share one line.
  std::vector<std::pair<const v1::UncountedEvent*, std::string>> lines;
  for (const v1::UncountedEvent& u : table.uncounted()) {
    auto it = std::find_if(lines.begin(), lines.end(), [&](const auto& l) { return l.first->reason() == u.reason(); });
    if (it == lines.end()) {
      lines.emplace_back(&u, u.event());
    } else {
      it->second += ", " + u.event();
    }
  }
  for (const auto& [u, events] : lines) {
    std::cout << "not countable  " << events << ": " << u->reason() << (u->fix().empty() ? "" : " (" + u->fix() + ")")
              << "\n";
  }
  std::cout << "\n";
}

// The domains a table's ops were measured in, in the order first seen, with
// the range of their idle power over the runs that measured them.
struct DomainColumn {
  std::string name, inside;
  double idle_min_w = 0, idle_max_w = 0;
  double energy_j = 0, dynamic_energy_j = 0;  // over the nodes, each computed once
};

std::vector<DomainColumn> DomainColumns(const v1::CostTable& table) {
  std::vector<DomainColumn> columns;
  for (const v1::NodeCost& c : table.costs()) {
    for (const v1::DomainEnergy& d : c.domains()) {
      auto it =
          std::find_if(columns.begin(), columns.end(), [&](const DomainColumn& col) { return col.name == d.domain(); });
      if (it == columns.end()) {
        it = columns.insert(columns.end(), DomainColumn{d.domain(), d.inside(), d.idle_power_w(), d.idle_power_w()});
      }
      it->idle_min_w = std::min(it->idle_min_w, d.idle_power_w());
      it->idle_max_w = std::max(it->idle_max_w, d.idle_power_w());
      it->energy_j += d.energy_j();
      it->dynamic_energy_j += d.dynamic_energy_j();
    }
  }
  return columns;
}

const v1::DomainEnergy* FindDomain(const v1::NodeCost& c, const std::string& name) {
  for (const v1::DomainEnergy& d : c.domains()) {
    if (d.domain() == name) return &d;
  }
  return nullptr;
}

constexpr char kNoDomains[] =
    "none stored for this table: its energy is an estimate (no sensor measured it), or was measured before "
    "energy was kept per domain (run `edgecost profile --force` where RAPL, hwmon, a battery or a meter measures "
    "it)";

// Each node's energy per domain of the probe that measured it: total and dynamic
// (above the domain's idle power), with nested domains marked and kept out of the total.
void PrintDomains(const v1::CostTable& table) {
  const std::vector<DomainColumn> columns = DomainColumns(table);
  if (columns.empty()) {
    std::cout << "domains        " << kNoDomains << "\n\n";
    return;
  }
  std::string top_level, nested;
  for (const DomainColumn& d : columns) {
    char idle[64];
    if (d.idle_max_w - d.idle_min_w > 1e-3 * std::max(1e-12, d.idle_max_w)) {
      std::snprintf(idle, sizeof idle, "idle %.3f .. %.3f W", d.idle_min_w, d.idle_max_w);
    } else {
      std::snprintf(idle, sizeof idle, "idle %.3f W", d.idle_max_w);
    }
    std::cout << "domain         " << d.name << (d.inside.empty() ? "" : " (inside " + d.inside + ")") << ", " << idle
              << "\n";
    std::string& list = d.inside.empty() ? top_level : nested;
    list += (list.empty() ? "" : ", ") + d.name;
  }
  std::vector<Table::Column> header = {{"#"}, {"name", Table::Align::kLeft}, {"runtime"}};
  for (const DomainColumn& d : columns) header.push_back({d.name + (d.inside.empty() ? "" : " *")});
  header.push_back({"total"});
  Table out(header);
  auto cell = [](double energy_j, double dynamic_j) {
    return FormatJoules(energy_j) + " (" + FormatJoules(dynamic_j) + ")";
  };
  double total_j = 0, total_dynamic_j = 0;
  for (int i = 0; i < table.costs_size(); ++i) {
    const v1::NodeCost& c = table.costs(i);
    if (c.op_key().empty()) continue;
    std::vector<std::string> row = {std::to_string(i), table.graph().nodes(i).name(), FormatSeconds(c.runtime_s())};
    double dynamic_j = 0;
    for (const DomainColumn& col : columns) {
      const v1::DomainEnergy* d = FindDomain(c, col.name);
      row.push_back(d ? cell(d->energy_j(), d->dynamic_energy_j()) : "-");  // not measured for this op: never a zero
      if (d && d->inside().empty()) dynamic_j += d->dynamic_energy_j();
    }
    row.push_back(c.domains_size() > 0 ? cell(c.compute_j(), dynamic_j) : "-");
    if (c.domains_size() > 0) {
      total_j += c.compute_j();
      total_dynamic_j += dynamic_j;
    }
    out.AddRow(row);
  }
  out.AddRule();
  std::vector<std::string> total = {"", "total", ""};
  for (const DomainColumn& d : columns) total.push_back(cell(d.energy_j, d.dynamic_energy_j));
  total.push_back(cell(total_j, total_dynamic_j));
  out.AddRow(total);
  out.Print(std::cout);
  std::cout << "(energy per execution, dynamic in parentheses: above the domain's idle power; total = " << top_level
            << (nested.empty() ? "" : "; * " + nested + " nested, already inside another domain") << ")\n\n";
}

// The same view as JSON: the domains with their idle power, each node's energy per domain, the totals.
nlohmann::json DomainsJson(const v1::CostTable& table) {
  const std::vector<DomainColumn> columns = DomainColumns(table);
  nlohmann::json doc = {{"model", table.graph().model()},
                        {"device", table.device()},
                        {"costSource", table.cost_source()},
                        {"domains", nlohmann::json::array()},
                        {"nodes", nlohmann::json::array()}};
  if (columns.empty()) doc["note"] = kNoDomains;
  for (const DomainColumn& d : columns) {
    doc["domains"].push_back({{"domain", d.name},
                              {"inside", d.inside},
                              {"idlePowerMinW", d.idle_min_w},
                              {"idlePowerMaxW", d.idle_max_w},
                              {"energyJ", d.energy_j},
                              {"dynamicEnergyJ", d.dynamic_energy_j}});
  }
  for (int i = 0; i < table.costs_size(); ++i) {
    const v1::NodeCost& c = table.costs(i);
    if (c.op_key().empty()) continue;
    nlohmann::json node = {{"node", i},
                           {"name", table.graph().nodes(i).name()},
                           {"runtimeS", c.runtime_s()},
                           {"energyJ", c.compute_j()},
                           {"domains", nlohmann::json::array()}};
    for (const v1::DomainEnergy& d : c.domains()) {
      node["domains"].push_back({{"domain", d.domain()},
                                 {"inside", d.inside()},
                                 {"energyJ", d.energy_j()},
                                 {"idlePowerW", d.idle_power_w()},
                                 {"dynamicEnergyJ", d.dynamic_energy_j()}});
    }
    doc["nodes"].push_back(std::move(node));
  }
  return doc;
}

// Measured costs next to POET's estimate for the same graph.
int RunMeasuredCosts(const CostsFlags& flags, const graph::GraphSpec& spec, const Context& ctx) {
  auto opened = ctx.Store(costdb::OpenMode::kReadOnly).Db();
  if (!opened.ok()) return Failure(opened.status());
  costdb::CostDb* db = *opened;
  // As GetCostTable resolves it, so that a table missing at this batch size or thread count names
  // those stored, each with its command.
  v1::GetCostTableRequest request;
  request.set_model(flags.graph.model_or_file);
  request.set_device(flags.device);
  // measured-in-step: kept by `edgecost train` from the node times inside real steps
  request.set_cost_source(InStep(flags) ? service::kMeasuredInStepSource : profiler::kMeasuredSource);
  request.set_batch_size(static_cast<uint32_t>(flags.graph.batch_size));
  if (flags.graph.derivation_option->count() > 0) request.set_derivation(flags.graph.derivation);
  request.set_trainable(flags.graph.trainable);
  request.set_threads(static_cast<uint32_t>(flags.threads));
  Result<v1::CostTable> measured = service::ResolveCostTable(&*db, request);
  if (!measured.ok()) return Failure(measured.status());
  *measured->mutable_memory() = service::StepMemoryOf(measured->graph());
  if (flags.csv) {
    std::cout << service::CostTableCsv(*measured);
    return kExitOk;
  }
  if (flags.json) {
    if (flags.domains) {
      std::cout << DomainsJson(*measured).dump(2) << "\n";
    } else {
      PrintJson(*measured);
    }
    return kExitOk;
  }
  auto estimate = graph::LoadCostTable(spec, flags.platform, graph::kPoetFlopsSource);
  if (!estimate.ok()) return Failure(estimate.status());
  const std::string poet = "poet-flops " + flags.platform;
  Table out({{"#"},
             {"name", Table::Align::kLeft},
             {"runtime"},
             {"spread"},
             {"95% interval"},
             {EnergyHeader(*measured)},
             {poet + " runtime"},
             {poet + " energy ESTIMATED"},
             {"op", Table::Align::kLeft}});
  for (int i = 0; i < measured->costs_size(); ++i) {
    const v1::NodeCost& m = measured->costs(i);
    const v1::NodeCost& e = estimate->costs(i);
    const bool stats = m.runtime_stats().repetitions() > 0;
    out.AddRow({std::to_string(i), measured->graph().nodes(i).name(),
                FormatSeconds(m.runtime_s()) + (m.unreliable() ? " !" : ""),
                stats ? FormatSeconds(m.runtime_stats().stddev_s()) : "", Interval(m.runtime_stats()),
                FormatJoules(m.compute_j()), FormatSeconds(e.runtime_s()), FormatJoules(e.compute_j()), m.op_key()});
  }
  const Totals t = Sum(*measured), te = Sum(*estimate);
  out.AddRule();
  out.AddRow({"", "total", FormatSeconds(t.runtime_s), "", "", FormatJoules(t.compute_j), FormatSeconds(te.runtime_s),
              FormatJoules(te.compute_j), ""});
  if (!flags.summary && !flags.counters && !flags.domains) {
    out.Print(std::cout);
    std::cout << "(! unreliable: measured while the device was busy; spread is the standard deviation of the "
                 "repetitions, the interval that of the median)\n\n";
  }
  if (flags.counters) PrintCounters(*measured);
  if (flags.domains) PrintDomains(*measured);
  PrintSummary(*measured, t);
  if (measured->cost_source() == profiler::kMeasuredSource) PrintUncertainty(*measured);
  return kExitOk;
}

// The table from a daemon: the same request the CLI would resolve locally.
int RunRemoteCosts(const CostsFlags& flags, const Context& ctx) {
  if (flags.store || !flags.out_path.empty()) return UsageError(InvalidArgument("--store and --out are local only"));
  v1::GetCostTableRequest request;
  request.set_model(flags.graph.model_or_file);
  request.set_device(flags.device.empty() ? flags.platform : flags.device);
  if (flags.device.empty() || InStep(flags)) request.set_cost_source(flags.source);
  request.set_batch_size(static_cast<uint32_t>(flags.graph.batch_size));
  if (flags.graph.derivation_option->count() > 0) request.set_derivation(flags.graph.derivation);
  request.set_trainable(flags.graph.trainable);
  request.set_threads(static_cast<uint32_t>(flags.threads));
  v1::CostTable table;
  if (Status s = daemon::CallRemote(ctx.remote, "CostService/GetCostTable", request, table); !s.ok()) return Failure(s);
  *table.mutable_memory() = service::StepMemoryOf(table.graph());
  if (flags.csv) {
    std::cout << service::CostTableCsv(table);
    return kExitOk;
  }
  if (flags.json) {
    if (flags.domains) {
      std::cout << DomainsJson(table).dump(2) << "\n";
    } else {
      PrintJson(table);
    }
    return kExitOk;
  }
  const Totals totals = Sum(table);
  if (flags.counters || flags.domains) {
    if (flags.counters) PrintCounters(table);
    if (flags.domains) PrintDomains(table);
  } else if (!flags.summary) {
    PrintNodeTable(table, totals);
  }
  PrintSummary(table, totals);
  if (table.cost_source() == profiler::kMeasuredSource) PrintUncertainty(table);
  return kExitOk;
}

int RunCosts(const CostsFlags& flags, const Context& ctx) {
  if (flags.counters && flags.device.empty()) {
    return UsageError(
        InvalidArgument("--counters shows measured performance counters: add --device this (or the "
                        "device's name)"));
  }
  if (flags.domains && flags.device.empty()) {
    return UsageError(
        InvalidArgument("--domains shows energy measured per domain: add --device this (or the device's name)"));
  }
  if (flags.threads > 0 && flags.device.empty()) {
    return UsageError(
        InvalidArgument("--threads picks a measured cost table: add --device this (or the device's name)"));
  }
  if (!flags.device.empty() && flags.source_option->count() > 0 && flags.source != profiler::kMeasuredSource &&
      !InStep(flags)) {
    return UsageError(InvalidArgument("--source " + flags.source + " is an estimate for a board preset (--platform); " +
                                      "with --device the source is measured (the default) or measured-in-step"));
  }
  if (!ctx.remote.empty()) return RunRemoteCosts(flags, ctx);
  auto parsed = flags.graph.Spec();
  if (!parsed.ok()) return UsageError(parsed.status());
  auto spec = service::ResolveModel(ctx.Store(costdb::OpenMode::kReadOnly), *parsed);  // a stored model's name works like a zoo model's
  if (!spec.ok()) return Failure(spec.status());
  if (!flags.device.empty()) {
    return RunMeasuredCosts(flags, *spec, ctx);
  }
  auto table = graph::LoadCostTable(*spec, flags.platform, flags.source);
  if (!table.ok()) return Failure(table.status());
  *table->mutable_memory() = service::StepMemoryOf(table->graph());

  if (!flags.out_path.empty()) {
    std::ofstream out(flags.out_path);
    out << graph::CostTableToTrainingGraphJson(*table);
    if (!out.flush()) return Failure(PermissionDenied("cannot write " + flags.out_path));
  }
  int64_t stored_id = 0;
  costdb::Store& store = ctx.Store(costdb::OpenMode::kReadWrite);
  if (flags.store) {
    auto db = store.Db();
    if (!db.ok()) return Failure(db.status());
    auto id = service::StoreCostTable(**db, *table);
    if (!id.ok()) return Failure(id.status());
    stored_id = *id;
  }

  if (flags.csv) {
    std::cout << service::CostTableCsv(*table);
    return kExitOk;
  }
  if (flags.json) {
    PrintJson(*table);
    return kExitOk;
  }
  const Totals totals = Sum(*table);
  if (!flags.summary) PrintNodeTable(*table, totals);
  PrintSummary(*table, totals);
  if (flags.store) std::cout << "stored         cost table #" << stored_id << " in " << store.printable_path() << "\n";
  if (!flags.out_path.empty()) std::cout << "written        " << flags.out_path << " (training-graph/v1)\n";
  return kExitOk;
}

}  // namespace

void RegisterCostsCommand(CLI::App& app, Context& ctx) {
  auto flags = std::make_shared<CostsFlags>();
  CLI::App* cmd = app.add_subcommand("costs", "Per-node runtime, energy, memory and paging costs of a training graph");
  flags->graph.AddTo(cmd);
  std::vector<std::string> presets;
  for (const auto& preset : graph::BoardPresets()) presets.emplace_back(preset.name);
  cmd->add_option("--platform", flags->platform, "Board preset")->capture_default_str()->check(CLI::IsMember(presets));
  flags->source_option =
      cmd->add_option("--source", flags->source,
                      "Cost source: with --platform an estimate (poet-flops); with --device measured (ops one at a "
                      "time, the default there) or measured-in-step (node times inside real steps, kept by "
                      "`edgecost train`)")
          ->capture_default_str();
  cmd->add_flag("--json", flags->json, "Print protobuf JSON (CostTable)");
  cmd->add_flag("--csv", flags->csv,
                "Print CSV, a row per node in plain SI numbers (runtime_s, compute_j, ram_bytes), for spreadsheets")
      ->excludes("--json");
  cmd->add_flag("--store", flags->store, "Store the cost table in the cost database");
  cmd->add_flag("--summary", flags->summary, "Print totals only, not the per-node table");
  cmd->add_flag("--counters", flags->counters,
                "With --device: each op's performance counters per execution (cycles, instructions, cache and "
                "branch misses where a PMU exists; task-clock, page faults, context switches, migrations always), "
                "and what the device cannot count");
  cmd->add_flag("--domains", flags->domains,
                "With --device: each op's energy per domain of the probe that measured it (RAPL package, core, "
                "dram; each hwmon rail; the battery; a meter), total and dynamic above the domain's idle power; "
                "nested domains (RAPL core inside package) are marked and not added to the total");
  cmd->add_option("--out", flags->out_path, "Also write the table as training-graph/v1 JSON");
  cmd->add_option("--device", flags->device,
                  "Show measured costs of a profiled device (\"this\": this machine) next to poet-flops");
  cmd->add_option("--threads", flags->threads,
                  "With --device: the table profiled at this many compute threads (default: all cores for this "
                  "device; for another, its only thread count, else the most, stated)")
      ->check(CLI::PositiveNumber);
  cmd->footer(
      "Examples:\n"
      "  edgecost costs resnet18_cifar --platform a72\n"
      "  edgecost costs vgg16 --platform m4 --summary --store\n"
      "  edgecost costs resnet50 --platform a72 --out resnet50.a72.json\n"
      "  edgecost costs resnet18_cifar --device this\n"
      "  edgecost costs resnet18_cifar --device this --counters\n"
      "  edgecost costs resnet18_cifar --device this --domains --json");
  cmd->callback([flags, &ctx] { ctx.exit_code = RunCosts(*flags, ctx); });
}

}  // namespace edgecost::cli
