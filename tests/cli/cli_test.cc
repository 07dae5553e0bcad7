// The `edgecost` command as a user runs it: output, files and exit codes.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <regex>
#include <string>
#include <tuple>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/units.h"
#include "costdb/costdb.h"
#include "costdb/postgres.h"
#include "proto/edgecost.pb.h"
#include "proto/json.h"
#include "tests/shell.h"
#include "tests/temp_dir.h"

namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using edgecost::testing::CommandResult;

class CliTest : public edgecost::testing::TempDirTest {
 protected:
  CommandResult Edgecost(const std::string& args) {
    return Run("EDGECOST_DB='" + (dir_ / "costs.db").string() + "' " + EDGECOST_BIN + " " + args);
  }
  // Its stdout alone (for --json), stderr going to stderr.txt in the test's folder.
  CommandResult EdgecostStdout(const std::string& args) {
    return Run("{ EDGECOST_DB='" + (dir_ / "costs.db").string() + "' " + EDGECOST_BIN + " " + args + " 2>'" +
               (dir_ / "stderr.txt").string() + "'; }");
  }
  // `args --json`'s document, checked where the wording is not the point; null (and a failure) if
  // the command failed or printed no JSON.
  nlohmann::json Json(const std::string& args) {
    const CommandResult run = EdgecostStdout(args + " --json");
    EXPECT_EQ(run.exit_code, 0) << args << ": " << run.output;
    nlohmann::json doc = nlohmann::json::parse(run.output, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(doc.is_discarded()) << args << " printed no JSON: " << run.output;
    return run.exit_code == 0 && !doc.is_discarded() ? doc : nlohmann::json();
  }
  // A schedule of linear at batch 2 under 20 kB, written by solve; empty if solve failed.
  std::string SolveLinearSchedule() {
    const std::string schedule = (dir_ / "s.json").string();
    const CommandResult solved = Edgecost(
        "solve --model linear --platform a72 --derivation exact --batch-size 2 --activation-budget 20kB "
        "--runtime-budget 3x --time-limit-s 5 --out " +
        schedule);
    EXPECT_EQ(solved.exit_code, 0) << solved.output;
    return solved.exit_code == 0 ? schedule : "";
  }
  // A shell command, its stdout and stderr together.
  static CommandResult Run(const std::string& shell_command) { return edgecost::testing::RunShell(shell_command); }
};

TEST_F(CliTest, ModelsListsTheZoo) {
  const nlohmann::json listed = Json("models");
  std::map<std::string, nlohmann::json> models;
  for (const nlohmann::json& model : listed["models"]) models[model["name"].get<std::string>()] = model;
  for (const char* model :
       {"linear", "vgg16", "vgg16_cifar", "resnet18", "resnet50", "resnet18_cifar", "bert", "transformer"}) {
    ASSERT_TRUE(models.count(model)) << model;
    EXPECT_EQ(models[model]["kind"], "zoo");
  }
  EXPECT_EQ(models["resnet18_cifar"]["trainingNodes"], 151);  // exact derivation (POET's has 133)
  EXPECT_THAT(Edgecost("models").output, HasSubstr("resnet18_cifar"));
}

TEST_F(CliTest, CostsPrintsTotalsAndStoresTheTable) {
  const CommandResult run = Edgecost("costs resnet18_cifar --platform a72 --derivation poet --store --summary");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("7.89 J"));  // POET's README optimum is the all-once floor
  EXPECT_THAT(run.output, HasSubstr("stored"));
  const nlohmann::json info = Json("db info");
  EXPECT_EQ(info["rows"]["node_costs"], 133);
  EXPECT_EQ(info["rows"]["cost_tables"], 1);
}

// The same commands on a PostgreSQL store (--db URL) give the same answers as on the file; `db info`
// names the backend, and a password in the URL is never printed.
TEST_F(CliTest, APostgresStoreGivesTheSameAnswers) {
  const char* base = std::getenv("EDGECOST_TEST_PG_URL");
  if (!base || !*base) GTEST_SKIP() << "EDGECOST_TEST_PG_URL is not set: no PostgreSQL (scripts/test starts one)";
  const std::string schema = "cli" + std::to_string(::getpid());
  {
    auto admin = edgecost::costdb::OpenPostgres(base, false, 5000);
    ASSERT_TRUE(admin.ok()) << admin.status().message();
    ASSERT_TRUE(admin->Exec("DROP SCHEMA IF EXISTS " + schema + " CASCADE; CREATE SCHEMA " + schema).ok());
  }
  const std::string url = std::string(base) + (std::string(base).find('?') == std::string::npos ? "?" : "&") +
                          "options=-csearch_path%3D" + schema;
  const std::string on_store = "--db '" + url + "' ";
  const std::string costs = "costs resnet18_cifar --platform a72 --derivation poet --store --summary";
  const CommandResult stored = Edgecost(on_store + costs);
  ASSERT_EQ(stored.exit_code, 0) << stored.output;
  EXPECT_THAT(stored.output, HasSubstr("7.89 J"));
  const nlohmann::json info = Json(on_store + "db info");
  EXPECT_EQ(info["backend"], "postgresql");
  EXPECT_EQ(info["rows"]["node_costs"], 133);
  const std::string solve =
      "solve --model resnet18_cifar --platform a72 --derivation poet --activation-budget 3MB --runtime-budget 7.6x";
  const nlohmann::json on_pg = Json(on_store + solve);
  const nlohmann::json on_file = Json(solve);
  EXPECT_EQ(on_pg["energy"], on_file["energy"]);
  EXPECT_EQ(on_pg["peakRamBytes"], on_file["peakRamBytes"]);
  EXPECT_EQ(Json(on_store + "db info")["rows"]["schedules"], 1);

  const std::string secret = "--db 'postgresql://fleet:s3cret@/edgecost?host=/nonexistent-edgecost' ";
  const CommandResult unreachable = Edgecost(secret + "db info");
  EXPECT_NE(unreachable.exit_code, 0);
  EXPECT_THAT(unreachable.output, HasSubstr("fleet:***@"));
  EXPECT_THAT(unreachable.output, HasSubstr("unreachable"));
  EXPECT_THAT(unreachable.output, Not(HasSubstr("s3cret")));
  const CommandResult serve = Edgecost("serve --store 'postgresql://fleet:s3cret@/edgecost?host=/x' --socket " +
                                       (dir_ / "s.sock").string() + " --check-config");
  EXPECT_EQ(serve.exit_code, 0) << serve.output;
  EXPECT_THAT(serve.output, HasSubstr("fleet:***@"));
  EXPECT_THAT(serve.output, Not(HasSubstr("s3cret")));

  auto admin = edgecost::costdb::OpenPostgres(base, false, 5000);
  if (admin.ok()) (void)admin->Exec("DROP SCHEMA IF EXISTS " + schema + " CASCADE");
}

TEST_F(CliTest, CostsWritesAGraphFileThatReadsBack) {
  const std::string file = (dir_ / "r18.json").string();
  ASSERT_EQ(Edgecost("costs resnet18_cifar --platform m4 --out " + file + " --summary").exit_code, 0);
  const CommandResult again = Edgecost("costs " + file + " --json");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_THAT(again.output, HasSubstr("\"costSource\": \"poet-flops\""));
}

// Counters per op are shown with the device; a calibration against a (fake
// hwmon) meter estimates energy once the meter is gone, labelled with it.
TEST_F(CliTest, CountersAndACalibratedEnergyModel) {
  EXPECT_EQ(Edgecost("costs linear --counters").exit_code, 2);  // counters are measured: --device needed
  const std::string root = (dir_ / "sys").string();
  const std::string env = "EDGECOST_SYSFS_ROOT=" + root + " ";
  const CommandResult no_meter = Run(env + "EDGECOST_DB=" + (dir_ / "costs.db").string() + " " + EDGECOST_BIN +
                                     " calibrate --window-s 0.02 --rounds 1");
  EXPECT_EQ(no_meter.exit_code, 1);
  EXPECT_THAT(no_meter.output, HasSubstr("no measured energy source"));

  std::filesystem::create_directories(dir_ / "sys/class/hwmon/hwmon0");
  std::ofstream(dir_ / "sys/class/hwmon/hwmon0/name") << "fakemeter\n";
  std::ofstream(dir_ / "sys/class/hwmon/hwmon0/power1_input") << "3000000\n";  // 3 W, always
  const CommandResult calibrated = Run(env + "EDGECOST_DB=" + (dir_ / "costs.db").string() + " " + EDGECOST_BIN +
                                       " calibrate --window-s 0.02 --rounds 2");
  if (calibrated.output.find("no performance counter can be opened") != std::string::npos) {
    GTEST_SKIP() << "perf_event_open counts nothing here: " << calibrated.output;
  }
  ASSERT_EQ(calibrated.exit_code, 0) << calibrated.output;
  EXPECT_THAT(calibrated.output, HasSubstr("idle power (W)"));
  EXPECT_THAT(calibrated.output, HasSubstr("MODEL (calibrated against hwmon fakemeter (hwmon0) on "));

  // The meter is gone: a profile estimates each op's energy from its counters, and says with what.
  std::filesystem::remove_all(dir_ / "sys/class/hwmon");
  const CommandResult profile = Run(env + "EDGECOST_DB=" + (dir_ / "costs.db").string() + " " + EDGECOST_BIN +
                                    " profile --model linear --min-window-s 0.005 --accept-noisy");
  ASSERT_EQ(profile.exit_code, 0) << profile.output;
  EXPECT_THAT(profile.output, HasSubstr("counters: task-clock"));
  EXPECT_THAT(profile.output, HasSubstr("ESTIMATED energy: MODEL (calibrated against hwmon fakemeter"));
  const CommandResult costs = Edgecost("costs linear --device this --counters");
  ASSERT_EQ(costs.exit_code, 0) << costs.output;
  EXPECT_THAT(costs.output, HasSubstr("task-clock (CPU time)"));
  EXPECT_THAT(costs.output, HasSubstr("energy from MODEL (calibrated against hwmon fakemeter"));
  // What cannot be counted is said once, on one line per reason, and never shown as a column of zeros.
  const CommandResult json = Edgecost("costs linear --device this --json");
  EXPECT_THAT(json.output, HasSubstr("\"counters\""));
  if (json.output.find("\"uncounted\": []") == std::string::npos) {  // something was not countable
    EXPECT_THAT(costs.output, HasSubstr("not countable  "));
  }
}

// Energy per domain of a (fake) RAPL package with core and dram: shown with
// the device, the core marked as inside the package; none for an estimate.
TEST_F(CliTest, CostsPerDomain) {
  EXPECT_EQ(Edgecost("costs linear --domains").exit_code, 2);  // measured: --device needed
  const std::string pkg = "sys/class/powercap/intel-rapl:0/";
  for (const auto& [zone, name] : std::vector<std::pair<std::string, std::string>>{
           {pkg, "package-0"}, {pkg + "intel-rapl:0:0/", "core"}, {pkg + "intel-rapl:0:1/", "dram"}}) {
    std::filesystem::create_directories(dir_ / zone);
    std::ofstream(dir_ / zone / "name") << name << "\n";
    std::ofstream(dir_ / zone / "energy_uj") << "1000000\n";
  }
  EXPECT_THAT(Edgecost("probes --sysfs-root " + (dir_ / "sys").string()).output,
              HasSubstr("package-0, core (inside package-0), dram"));
  const std::string env = "EDGECOST_SYSFS_ROOT=" + (dir_ / "sys").string() + " ";
  const CommandResult profile = Run(env + "EDGECOST_DB=" + (dir_ / "costs.db").string() + " " + EDGECOST_BIN +
                                    " profile --model linear --min-window-s 0.005 --accept-noisy");
  ASSERT_EQ(profile.exit_code, 0) << profile.output;
  EXPECT_THAT(profile.output, HasSubstr("measured by rapl intel-rapl:0"));
  const CommandResult costs = Edgecost("costs linear --device this --domains");
  ASSERT_EQ(costs.exit_code, 0) << costs.output;
  EXPECT_THAT(costs.output, HasSubstr("domain         package-0, idle "));
  EXPECT_THAT(costs.output, HasSubstr("domain         core (inside package-0), idle "));
  EXPECT_THAT(costs.output, HasSubstr("total = package-0, dram; * core nested"));
  const CommandResult json = Edgecost("costs linear --device this --domains --json");
  ASSERT_EQ(json.exit_code, 0) << json.output;
  EXPECT_THAT(json.output, HasSubstr("\"inside\": \"package-0\""));
  EXPECT_THAT(json.output, HasSubstr("\"dynamicEnergyJ\""));
  EXPECT_THAT(Edgecost("costs linear --device this --json").output, HasSubstr("\"domains\": ["));

  // Without a sensor the energy is an estimate: no domains, said so.
  const std::string other = (dir_ / "estimated.db").string();
  const CommandResult estimated =
      Run("EDGECOST_SYSFS_ROOT=" + (dir_ / "no-sysfs").string() + " EDGECOST_DB=" + other + " " + EDGECOST_BIN +
          " profile --model linear --min-window-s 0.005 --accept-noisy");
  ASSERT_EQ(estimated.exit_code, 0) << estimated.output;
  const CommandResult none = Run("EDGECOST_DB=" + other + " " + EDGECOST_BIN + " costs linear --device this --domains");
  ASSERT_EQ(none.exit_code, 0) << none.output;
  EXPECT_THAT(none.output, HasSubstr("domains        none stored for this table"));
}

TEST_F(CliTest, GraphFormats) {
  EXPECT_THAT(Edgecost("graph transformer --derivation poet").output, HasSubstr("layer18_GradientLayer"));
  EXPECT_THAT(Edgecost("graph linear --format dot").output, HasSubstr("digraph"));
  EXPECT_THAT(Edgecost("graph linear --format json --derivation exact").output, HasSubstr("\"role\": \"grad_weight\""));
}

TEST_F(CliTest, ExitCodesSeparateUsageFromFailure) {
  EXPECT_EQ(Edgecost("").exit_code, 2);       // no subcommand
  EXPECT_EQ(Edgecost("costs").exit_code, 2);  // missing model
  EXPECT_EQ(Edgecost("costs linear --platform z80").exit_code, 2);
  EXPECT_EQ(Edgecost("graph linear --trainable last:x").exit_code, 2);
  const CommandResult unknown = Edgecost("costs alexnet");
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_THAT(unknown.output, HasSubstr("resnet18_cifar"));  // lists what exists
  const CommandResult missing = Edgecost("costs /nonexistent/graph.json");
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_THAT(missing.output, HasSubstr("/nonexistent/graph.json"));
  EXPECT_EQ(Edgecost("costs linear --platform jetsontx2").exit_code, 1);
  EXPECT_EQ(Edgecost("--help").exit_code, 0);
}

TEST_F(CliTest, SolveWritesAScheduleThatCheckAccepts) {
  const std::string schedule = (dir_ / "schedule.json").string();
  const CommandResult run = Edgecost(
      "solve --model resnet18_cifar --platform a72 --derivation poet --activation-budget 3MB --runtime-budget 7.6x"
      " --out " +
      schedule + " --svg " + (dir_ / "schedule.svg").string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("optimal (proven)"));
  EXPECT_THAT(run.output, HasSubstr("energy         7.89 J ESTIMATED = compute 7.89 J + recompute 0 J"));
  // The same figures as fields: POET's README optimum is the all-once floor, within the budget.
  const nlohmann::json solved = Json(
      "solve --model resnet18_cifar --platform a72 --derivation poet --activation-budget 3MB --runtime-budget 7.6x");
  EXPECT_EQ(solved["status"], "STATUS_OPTIMAL");
  EXPECT_NEAR(solved["energy"]["totalJ"].get<double>(), 7.8895, 1e-3);
  EXPECT_EQ(solved["energy"]["recomputeJ"], 0);
  EXPECT_LE(std::stoull(solved["peakRamBytes"].get<std::string>()), 3'000'000u);
  std::ifstream svg(dir_ / "schedule.svg");
  const std::string picture((std::istreambuf_iterator<char>(svg)), std::istreambuf_iterator<char>());
  EXPECT_THAT(picture, HasSubstr("<svg"));
  EXPECT_THAT(picture, HasSubstr("page-out"));  // the legend names every cell kind

  const CommandResult check = Edgecost("check " + schedule);
  EXPECT_EQ(check.exit_code, 0) << check.output;
  EXPECT_THAT(check.output, HasSubstr("valid"));

  // Stage 0 keeps nothing: stage 1 then lacks its input.
  std::ifstream in(schedule);
  std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t keep = json.find("\"keep\"");
  ASSERT_NE(keep, std::string::npos);
  const size_t open = json.find('[', keep);
  json.erase(open + 1, json.find(']', open) - open - 1);
  const std::string broken = (dir_ / "broken.json").string();
  std::ofstream(broken) << json;
  const CommandResult bad = Edgecost("check " + broken);
  EXPECT_EQ(bad.exit_code, 1) << bad.output;
  EXPECT_THAT(bad.output, HasSubstr("stage 1, node 0"));
  EXPECT_THAT(bad.output, HasSubstr("kept for the next stage but neither resident"));
}

TEST_F(CliTest, SolveSaysWhyABudgetCannotBeMet) {
  const CommandResult small = Edgecost("solve --model resnet18_cifar --platform a72 --activation-budget 100kB");
  EXPECT_EQ(small.exit_code, 1) << small.output;
  EXPECT_THAT(small.output, HasSubstr("infeasible"));
  EXPECT_THAT(small.output, HasSubstr("smallest       activation budget"));
  const CommandResult fast =
      Edgecost("solve --model resnet18_cifar --platform a72 --activation-budget 3MB --runtime-budget 0.5x");
  EXPECT_EQ(fast.exit_code, 2) << fast.output;
  EXPECT_THAT(fast.output, HasSubstr("must be at least 1x"));
  const CommandResult seconds =
      Edgecost("solve --model resnet18_cifar --platform a72 --activation-budget 3MB --runtime-budget 1ms");
  EXPECT_EQ(seconds.exit_code, 1) << seconds.output;
  EXPECT_THAT(seconds.output, HasSubstr("one plain training step takes"));
  const CommandResult unit = Edgecost("solve --model resnet18_cifar --activation-budget 3XB");
  EXPECT_EQ(unit.exit_code, 2) << unit.output;
  EXPECT_THAT(unit.output, HasSubstr("unknown size unit"));
  // A size without a unit is refused, naming the units, as a runtime budget without one is: never 1 byte.
  for (const std::string bare : {"--ram-budget 0.9", "--device-ram 3"}) {
    const CommandResult no_unit = Edgecost("solve --model resnet18_cifar " + bare + " --runtime-budget 2x");
    EXPECT_EQ(no_unit.exit_code, 2) << no_unit.output;
    EXPECT_THAT(no_unit.output, HasSubstr("has no unit"));
    EXPECT_THAT(no_unit.output, HasSubstr("MB"));
    EXPECT_THAT(no_unit.output, Not(HasSubstr("infeasible")));
  }
}

TEST_F(CliTest, SolveComparesTheBaselines) {
  const CommandResult run = Edgecost(
      "solve --model resnet18_cifar --platform a72 --activation-budget 2MB --runtime-budget 2x"
      " --compare --time-limit-s 3");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  for (const char* strategy : {"optimal", "checkpoint-all", "sqrt", "revolve", "paging-only"}) {
    EXPECT_THAT(run.output, HasSubstr(strategy));
  }
}

TEST_F(CliTest, DbInfoOnAFileThatIsNotADatabaseLeavesItAlone) {
  const std::filesystem::path notes = dir_ / "notes.txt";
  std::ofstream(notes) << "not a database\n";
  const CommandResult run = Edgecost("--db " + notes.string() + " db info");
  EXPECT_EQ(run.exit_code, 1);
  EXPECT_THAT(run.output, HasSubstr("not"));
  std::ifstream in(notes);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "not a database\n");
}

// Starts `edgecost profile` in the background, waits until it has stored two ops,
// then sends `signal`. Returns the exit status.
int ProfileAndSignal(const std::filesystem::path& dir, int signal) {
  const std::string log = (dir / "profile.log").string();
  const pid_t child = ::fork();
  if (child == 0) {
    const std::string db = (dir / "costs.db").string();
    ::freopen(log.c_str(), "w", stderr);
    ::execl(EDGECOST_BIN, EDGECOST_BIN, "--db", db.c_str(), "profile", "--model", "resnet18_cifar", "--threads", "1",
            "--verbose", static_cast<char*>(nullptr));  // --verbose: a line per op, not every few seconds
    ::_exit(127);
  }
  for (;;) {  // no deadline: the test's own timeout bounds a profile that never progresses
    std::ifstream in(log);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (text.find("op 2/") != std::string::npos) break;
    int status = 0;
    if (::waitpid(child, &status, WNOHANG) == child) return status;  // finished before the signal
    ::usleep(20000);
  }
  ::kill(child, signal);
  int status = 0;
  ::waitpid(child, &status, 0);
  return status;
}

TEST_F(CliTest, ProfileKilledMidRunKeepsWhatItMeasuredAndResumes) {
  const int status = ProfileAndSignal(dir_, SIGKILL);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the profile finished before it could be killed";
  // What was measured before the kill is in the database.
  EXPECT_THAT(Edgecost("db info").output, ::testing::ContainsRegex("op_costs +([2-9]|[1-4][0-9])\n"));
  const CommandResult resumed =
      Edgecost("profile --model resnet18_cifar --threads 1 --min-window-s 0.005 --accept-noisy");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  // Reused, unless stored unreliable (measured while the machine was busy): a resumed run measures those again.
  EXPECT_THAT(resumed.output, ::testing::ContainsRegex("ops +43 distinct: [0-9]+ measured now, [0-9]+ already stored"));
  EXPECT_EQ(Edgecost("db info").exit_code, 0);
}

TEST_F(CliTest, ProfileInterruptedByCtrlCStopsCleanly) {
  const int status = ProfileAndSignal(dir_, SIGINT);
  ASSERT_TRUE(WIFEXITED(status)) << "SIGINT should stop the profile at a safe point, not kill it";
  EXPECT_EQ(WEXITSTATUS(status), 1);
  std::ifstream in(dir_ / "profile.log");
  const CommandResult resumed =
      Edgecost("profile --model resnet18_cifar --threads 1 --min-window-s 0.005 --accept-noisy");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_THAT(resumed.output, HasSubstr("already stored"));
  EXPECT_THAT(resumed.output, HasSubstr("(source measured-in-step"));
}

// A profile's progress and result are a summary a person reads; each op's key is behind --verbose.
TEST_F(CliTest, ProfileSaysLittleByDefaultAndEveryOpWithVerbose) {
  const CommandResult quiet = Edgecost("profile --model linear --min-window-s 0.005 --accept-noisy");
  ASSERT_EQ(quiet.exit_code, 0) << quiet.output;
  EXPECT_THAT(quiet.output, HasSubstr("op 1/"));
  EXPECT_THAT(quiet.output, Not(HasSubstr("/onednn/"))) << "an op's key in the default output";
  EXPECT_THAT(quiet.output, HasSubstr("1 node without work"));
  EXPECT_THAT(quiet.output, Not(HasSubstr(" 1 threads")));
  const CommandResult verbose =
      Edgecost("profile --model linear --min-window-s 0.005 --accept-noisy --force --threads 1 --verbose");
  ASSERT_EQ(verbose.exit_code, 0) << verbose.output;
  EXPECT_THAT(verbose.output, HasSubstr("/onednn/"));
  EXPECT_THAT(verbose.output, HasSubstr(", 1 thread\n"));
}

}  // namespace

// Files from elsewhere are data, not command lines: whatever is in them, the
// command fails with exit 1 and says what is wrong, and never crashes.
TEST_F(CliTest, HostileGraphAndScheduleFilesFailCleanly) {
  const std::string graph = (dir_ / "graph.json").string();
  ASSERT_EQ(Edgecost("costs linear --platform a72 --out " + graph).exit_code, 0);
  std::ifstream in(graph);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t ram = text.find("\"ram_bytes\": ", text.find("layer1"));
  ASSERT_NE(ram, std::string::npos);
  const size_t value = ram + 13, end = text.find_first_of(",\n}", value);
  const size_t compute = text.find("\"compute_j\": ");
  const size_t compute_end = text.find_first_of(",\n}", compute + 13);
  for (const auto& [name, replaced, error] : std::vector<std::tuple<std::string, std::string, std::string>>{
           {"1e19", text.substr(0, value) + "1e19" + text.substr(end), "at most 1099511627776 (1 TiB)"},
           {"2^64", text.substr(0, value) + "18446744073709551616" + text.substr(end), "at most 1099511627776"},
           {"1e400", text.substr(0, compute + 13) + "1e400" + text.substr(compute_end), "number overflow"},
           {"string", text.substr(0, value) + "\"many\"" + text.substr(end), "'ram_bytes' must be a number"}}) {
    const std::string hostile = (dir_ / (name + ".json")).string();
    std::ofstream(hostile) << replaced;
    const CommandResult solve = Edgecost("solve --graph " + hostile + " --activation-budget 10kB --runtime-budget 2x");
    EXPECT_EQ(solve.exit_code, 1) << name << ": " << solve.output;
    EXPECT_THAT(solve.output, HasSubstr(error)) << name;
    EXPECT_THAT(solve.output, ::testing::Not(HasSubstr("--help"))) << name;
  }

  const std::string schedule = (dir_ / "schedule.json").string();
  ASSERT_EQ(
      Edgecost("solve --model linear --platform a72 --activation-budget 10kB --runtime-budget 2x --out " + schedule)
          .exit_code,
      0);
  std::ifstream saved(schedule);
  std::string json((std::istreambuf_iterator<char>(saved)), std::istreambuf_iterator<char>());
  const size_t compute_list = json.find("\"compute\": [");
  ASSERT_NE(compute_list, std::string::npos);
  json.insert(compute_list + 12, "4294967295, ");  // an id past 2^31 once wrote out of bounds
  std::ofstream(schedule) << json;
  const CommandResult check = Edgecost("check " + schedule);
  EXPECT_EQ(check.exit_code, 1) << check.output;
  EXPECT_THAT(check.output, HasSubstr("node 4294967295 does not exist"));
}

// 8 KB of random bytes in the middle of the database: every command that
// opens it fails with exit 1 and the advice, and writes nothing on top; the
// daemon refuses to start on it.
TEST_F(CliTest, ADamagedDatabaseIsRefusedByEveryCommand) {
  for (const char* model : {"linear", "resnet18_cifar", "vgg16", "resnet50"}) {
    for (const char* platform : {"a72", "m4", "m0"}) {
      ASSERT_EQ(Edgecost(std::string("costs ") + model + " --platform " + platform + " --store").exit_code, 0);
    }
  }
  const std::filesystem::path db = dir_ / "costs.db";
  const auto size = std::filesystem::file_size(db);
  {
    std::fstream file(db, std::ios::in | std::ios::out | std::ios::binary);
    file.seekp(static_cast<std::streamoff>(size / 2));
    for (int i = 0; i < 8192; ++i) file.put(static_cast<char>((i * 7919) ^ (i >> 3)));
  }
  for (const char* command : {"db info", "costs linear --platform a72 --store",
                              "solve --model linear --platform a72 --activation-budget 10kB --runtime-budget 2x",
                              "profile --model linear", "jobs"}) {
    const CommandResult run = Edgecost(command);
    EXPECT_EQ(run.exit_code, 1) << command << ": " << run.output;
    EXPECT_THAT(run.output, HasSubstr("is damaged")) << command;
    EXPECT_THAT(run.output, HasSubstr("restore it from a backup")) << command;
  }
  const CommandResult serve = Edgecost("serve --socket " + (dir_ / "s.sock").string());
  EXPECT_EQ(serve.exit_code, 1) << serve.output;
  EXPECT_THAT(serve.output, HasSubstr("is damaged"));
}

// A database on a read-only file system (a read-only bind mount in a mount
// namespace of its own) is read; a solve says it could not store its schedule.
TEST_F(CliTest, ADatabaseOnReadOnlyMediaIsRead) {
  ASSERT_EQ(Edgecost("costs linear --platform a72 --store").exit_code, 0);
  const std::filesystem::path media = dir_ / "media";
  std::filesystem::create_directories(media);
  // Every command runs in a mount namespace of its own, where `media` is `dir_` mounted read-only.
  auto on_media = [&](const std::string& command) {
    return Run("unshare -m sh -c 'mount --bind -o ro " + dir_.string() + " " + media.string() + " && " + command + "'");
  };
  const CommandResult probe = on_media("touch " + (media / "x").string());
  if (probe.output.find("Read-only file system") == std::string::npos) {
    GTEST_SKIP() << "no read-only bind mount here (needs root and mount namespaces): " << probe.output;
  }
  for (const char* command : {"db info", "costs linear --platform a72", "jobs",
                              "solve --model linear --platform a72 --activation-budget 10kB --runtime-budget 2x"}) {
    const CommandResult run =
        on_media(std::string(EDGECOST_BIN) + " --db " + (media / "costs.db").string() + " " + command);
    EXPECT_EQ(run.exit_code, 0) << command << ": " << run.output;
    if (std::string(command).starts_with("solve")) {
      EXPECT_THAT(run.output, HasSubstr("not stored     ")) << run.output;
    }
  }
}

// One power model: [probes.estimate] of the config reaches the stored costs
// and their label, and a flag overrides the one figure it names.
TEST_F(CliTest, TheConfiguredPowerModelReachesTheStoredCosts) {
  const std::string config = (dir_ / "probes.toml").string();
  std::ofstream(config) << "[probes.estimate]\nidle_w = 7.25\nactive_w_per_core = 0.5\n";
  const std::string no_sensors = "EDGECOST_SYSFS_ROOT=" + (dir_ / "no-sysfs").string() + " ";
  const std::string profile = "profile --model linear --min-window-s 0.005 --accept-noisy --probes-config " + config;
  const CommandResult configured =
      Run(no_sensors + "EDGECOST_DB=" + (dir_ / "costs.db").string() + " " + EDGECOST_BIN + " " + profile);
  ASSERT_EQ(configured.exit_code, 0) << configured.output;
  EXPECT_THAT(Edgecost("costs linear --device this").output, HasSubstr("idle 7.25 W, 0.50 W per busy core"));
  const CommandResult overridden = Run(no_sensors + "EDGECOST_DB=" + (dir_ / "costs.db").string() + " " + EDGECOST_BIN +
                                       " " + profile + " --force --idle-power-w 3");
  ASSERT_EQ(overridden.exit_code, 0) << overridden.output;
  EXPECT_THAT(Edgecost("costs linear --device this").output, HasSubstr("idle 3.00 W, 0.50 W per busy core"));
}

// Global flags work after the subcommand too, and --remote is refused by the
// commands that only run here instead of being silently ignored.
TEST_F(CliTest, GlobalFlagsAfterTheSubcommandAndRemoteWhereItMeansSomething) {
  const std::string other = (dir_ / "other.db").string();
  ASSERT_EQ(Run(std::string(EDGECOST_BIN) + " costs linear --platform a72 --store --db " + other).exit_code, 0);
  const CommandResult info = Run(std::string(EDGECOST_BIN) + " db info --db " + other);
  EXPECT_EQ(info.exit_code, 0) << info.output;
  EXPECT_THAT(info.output, HasSubstr(other));
  for (const char* command : {"db info", "graph linear", "probes", "serve --socket none"}) {
    const CommandResult remote = Edgecost(std::string("--remote unix:/nonexistent.sock ") + command);
    EXPECT_EQ(remote.exit_code, 2) << command << ": " << remote.output;
    EXPECT_THAT(remote.output,
                HasSubstr("--remote serves models, costs, solve, schedules, profile, train, runs and jobs"))
        << command;
  }
  const CommandResult models = Edgecost("--remote unix:/nonexistent.sock models");  // asks the daemon
  EXPECT_EQ(models.exit_code, 1) << models.output;
  EXPECT_THAT(models.output, HasSubstr("cannot reach the daemon"));
}

// What a user notices: one derivation everywhere, budgets that say what they
// mean, --json on every command, ESTIMATED where a model gave the energy, one
// activation total per model, and measured costs that move between databases.
TEST_F(CliTest, ConsistencyAUserNotices) {
  const CommandResult bare =
      Edgecost("solve --model linear --platform a72 --activation-budget 10kB --runtime-budget 2");
  EXPECT_EQ(bare.exit_code, 2) << bare.output;
  EXPECT_THAT(bare.output, HasSubstr("write 2x"));
  const CommandResult both = Edgecost("solve --model linear --platform m4 --device this --activation-budget 10kB");
  EXPECT_EQ(both.exit_code, 2) << both.output;
  EXPECT_THAT(both.output, HasSubstr("give one of them"));

  const CommandResult solve =
      Edgecost("solve --model linear --platform a72 --activation-budget 10kB --runtime-budget 2x --out " +
               (dir_ / "s.json").string());
  ASSERT_EQ(solve.exit_code, 0) << solve.output;
  EXPECT_THAT(solve.output, HasSubstr("J ESTIMATED"));
  // The activation budget is called so, not "RAM budget" (the whole process's, --ram-budget).
  EXPECT_THAT(solve.output, ::testing::ContainsRegex("activation budget 10.0 kB \\(10000 B\\)"));
  EXPECT_THAT(solve.output, Not(HasSubstr("RAM budget")));
  EXPECT_THAT(Edgecost("check " + (dir_ / "s.json").string() + " --json").output, HasSubstr("\"valid\": true"));
  EXPECT_THAT(Edgecost("graph linear --json").output, HasSubstr("\"index\": 0"));  // zero values printed
  EXPECT_THAT(Edgecost("probes --json").output, HasSubstr("\"energySources\""));
  EXPECT_THAT(Edgecost("graph linear").output, HasSubstr("derivation exact"));

  // One activation total: `models` and `costs` count the same bytes.
  const CommandResult models = Edgecost("models --json");
  const size_t linear = models.output.find("\"name\": \"linear\"");
  ASSERT_NE(linear, std::string::npos) << models.output;
  const size_t field = models.output.find("\"activationBytes\": \"", linear);
  ASSERT_NE(field, std::string::npos);
  const uint64_t bytes = std::stoull(models.output.substr(field + 20));
  EXPECT_THAT(Edgecost("costs linear --platform a72 --summary").output,
              HasSubstr("activations    " + edgecost::FormatBytes(static_cast<double>(bytes))));

  // Measured here, exported, imported into another database, solved there.
  const std::string no_sensors = "EDGECOST_SYSFS_ROOT=" + (dir_ / "no-sysfs").string() + " ";
  const CommandResult profile = Run(no_sensors + "EDGECOST_DB=" + (dir_ / "costs.db").string() + " " + EDGECOST_BIN +
                                    " profile --model linear --min-window-s 0.005 --accept-noisy --json");
  ASSERT_EQ(profile.exit_code, 0) << profile.output;
  EXPECT_THAT(profile.output, HasSubstr("\"costTableId\""));
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  const CommandResult unknown = Edgecost("costs linear --device no-such-board");
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_THAT(unknown.output, HasSubstr(std::string("measured devices: ") + host));
  const std::string exported = (dir_ / "export.json").string();
  const CommandResult out = Edgecost(std::string("db export ") + host + " --out " + exported);
  ASSERT_EQ(out.exit_code, 0) << out.output;
  const std::string other = "--db " + (dir_ / "host.db").string() + " ";
  // This host's own device: another database here takes it only when asked to.
  const CommandResult refused = Edgecost(other + "db import " + exported);
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_THAT(refused.output, HasSubstr("has the name of this host"));
  EXPECT_THAT(Edgecost(other + "db info").output, Not(HasSubstr(host)));
  const CommandResult in = Edgecost(other + "db import --replace " + exported);
  ASSERT_EQ(in.exit_code, 0) << in.output;
  const CommandResult there = Edgecost(other + "costs linear --device " + host + " --summary");
  ASSERT_EQ(there.exit_code, 0) << there.output;
  EXPECT_THAT(there.output, HasSubstr("ESTIMATED"));  // no sensor here: the energy is the power model's
  const std::string measured = (dir_ / "measured.json").string();
  EXPECT_EQ(Edgecost(other + "solve --model linear --device " + host +
                     " --activation-budget 10kB --runtime-budget 2x --out " + measured)
                .exit_code,
            0);
  // The schedule file carries its cost table: it checks against a database that never saw the device,
  // and an edited table is refused by its graph hash.
  const std::string empty = "--db " + (dir_ / "empty.db").string() + " ";
  const CommandResult portable = Edgecost(empty + "check " + measured);
  EXPECT_EQ(portable.exit_code, 0) << portable.output;
  EXPECT_THAT(portable.output, HasSubstr("valid"));
  std::ifstream file(measured);
  std::string json((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const size_t bytes_field = json.find("\"outputBytes\": \"");
  ASSERT_NE(bytes_field, std::string::npos);
  json.insert(bytes_field + 16, "1");  // a node of the carried graph made larger
  std::ofstream(dir_ / "edited.json") << json;
  const CommandResult edited = Edgecost(empty + "check " + (dir_ / "edited.json").string());
  EXPECT_EQ(edited.exit_code, 1) << edited.output;
  EXPECT_THAT(edited.output, HasSubstr("the file was edited"));
  const CommandResult info = Edgecost(other + "db info");
  EXPECT_THAT(info.output, HasSubstr("cost tables (current)"));
  EXPECT_THAT(info.output, HasSubstr(host));
  EXPECT_EQ(Edgecost("db export a72").exit_code, 1);  // a preset has nothing measured

  // The compressed binary form by default; imported twice, the second time adds nothing.
  const std::string binary = (dir_ / "export.costs").string();
  ASSERT_EQ(Edgecost(std::string("db export ") + host + " --out " + binary).exit_code, 0);
  EXPECT_LT(std::filesystem::file_size(binary), std::filesystem::file_size(exported));
  const std::string third = "--db " + (dir_ / "third.db").string() + " ";
  ASSERT_EQ(Edgecost(third + "db import --replace " + binary).exit_code, 0);
  const CommandResult twice = Edgecost(third + "db import --replace " + binary);
  ASSERT_EQ(twice.exit_code, 0) << twice.output;
  EXPECT_THAT(twice.output, HasSubstr("nothing new ("));
  // Pushed to a central store that is not there, then made; any planner solves for this host there.
  const std::string central = (dir_ / "fleet" / "central.db").string();
  const CommandResult unreachable = Edgecost("db push " + central);
  EXPECT_EQ(unreachable.exit_code, 1) << unreachable.output;
  EXPECT_THAT(unreachable.output, HasSubstr("does not exist"));
  EXPECT_THAT(unreachable.output, HasSubstr("nothing was lost"));
  const CommandResult pushed = Edgecost("db push --create " + central);
  ASSERT_EQ(pushed.exit_code, 0) << pushed.output;
  EXPECT_THAT(pushed.output, HasSubstr(std::string("pushed         ") + host + ": "));
  EXPECT_THAT(Edgecost("db push " + central).output, HasSubstr("up to date"));
  EXPECT_EQ(Edgecost("--db " + central + " solve --model linear --device " + host +
                     " --activation-budget 10kB --runtime-budget 2x")
                .exit_code,
            0);
}

// A cost table profiled at one thread count predicts a run at another only with a word of it.
TEST_F(CliTest, TrainSaysWhenItsCostTableWasProfiledAtOtherThreads) {
  const std::string no_sensors = "EDGECOST_SYSFS_ROOT=" + (dir_ / "no-sysfs").string() + " ";
  ASSERT_EQ(Run(no_sensors + "EDGECOST_DB=" + (dir_ / "costs.db").string() + " " + EDGECOST_BIN +
                " profile --model linear --batch-size 2 --threads 1 --min-window-s 0.005 --accept-noisy")
                .exit_code,
            0);
  // Two threads on a shared machine are often disturbed: its in-step table is kept anyway.
  const CommandResult other = Edgecost("train --model linear --batch-size 2 --steps 2 --threads 2 --accept-noisy");
  ASSERT_EQ(other.exit_code, 0) << other.output;
  EXPECT_THAT(other.output, HasSubstr("THREAD MISMATCH: this run uses 2 threads"));
  EXPECT_THAT(other.output, HasSubstr("stored: 1 thread"));
  const CommandResult same = Edgecost("train --model linear --batch-size 2 --steps 2 --threads 1 --accept-noisy");
  ASSERT_EQ(same.exit_code, 0) << same.output;
  // Planning and listing, unlike a run's predictions, refuse a count without a table, naming those stored.
  const CommandResult solve = Edgecost(
      "solve --model linear --batch-size 2 --device this --cost-source measured --threads 2 "
      "--activation-budget 1MB --no-store");
  EXPECT_EQ(solve.exit_code, 1) << solve.output;
  EXPECT_THAT(solve.output, HasSubstr("it has tables at 1 thread"));
  EXPECT_THAT(solve.output, HasSubstr("--threads 2"));
  // The default cost source, auto, takes the 2-thread run's in-step table, and says so.
  const CommandResult automatic = Edgecost(
      "solve --model linear --batch-size 2 --device this --threads 2 --activation-budget 1MB --no-store");
  EXPECT_EQ(automatic.exit_code, 0) << automatic.output;
  EXPECT_THAT(automatic.output, HasSubstr("cost source auto: measured-in-step"));
  const CommandResult costs = Edgecost("costs linear --batch-size 2 --device this --threads 2 --summary");
  EXPECT_EQ(costs.exit_code, 1) << costs.output;
  EXPECT_THAT(costs.output, HasSubstr("it has tables at 1 thread"));
  // The old spelling of solve's --threads works, with a word of the new one.
  const CommandResult old_flag = Edgecost(
      "solve --model linear --batch-size 2 --device this --compute-threads 2 --activation-budget 1MB --no-store");
  EXPECT_EQ(old_flag.exit_code, 0) << old_flag.output;
  EXPECT_THAT(old_flag.output, HasSubstr("`solve --compute-threads` is deprecated; use --threads"));
  // At batch 1, where nothing was profiled, the tables stored are named with the command that shows each.
  const CommandResult batch_one = Edgecost("costs linear --device this --summary");
  EXPECT_EQ(batch_one.exit_code, 1) << batch_one.output;
  EXPECT_THAT(batch_one.output, HasSubstr("batch size 2 at 1 thread"));
  EXPECT_THAT(batch_one.output, HasSubstr("`edgecost costs linear --device this --batch-size 2 --threads 1`"));
  // A schedule solved on the 2-thread table, trained on 1 thread, whose table is stored: the advice is
  // to solve again on it, not to profile what has been profiled.
  const std::string two_thread_schedule = (dir_ / "two.json").string();
  ASSERT_EQ(Edgecost("solve --model linear --batch-size 2 --device this --threads 2 --activation-budget 1MB --out " +
                     two_thread_schedule)
                .exit_code,
            0);
  const CommandResult mismatch = Edgecost("train --model linear --batch-size 2 --steps 2 --threads 1 --accept-noisy "
                                          "--schedule " + two_thread_schedule);
  ASSERT_EQ(mismatch.exit_code, 0) << mismatch.output;
  EXPECT_THAT(mismatch.output, HasSubstr("THREAD MISMATCH: the schedule's cost table was profiled at 2 threads"));
  EXPECT_THAT(mismatch.output, HasSubstr("a table at 1 thread is stored: solve the schedule again on it"));
  EXPECT_THAT(mismatch.output, Not(HasSubstr("run `edgecost profile")));
  const CommandResult one = Edgecost("costs linear --batch-size 2 --device this --threads 1 --summary");
  ASSERT_EQ(one.exit_code, 0) << one.output;
  EXPECT_THAT(one.output, HasSubstr("measured at 1 thread"));
  // The 2-thread run's in-step table sits beside the 1-thread one: the listing shows both counts.
  const CommandResult info = Edgecost("db info --json");
  EXPECT_THAT(info.output, HasSubstr("\"threads\": 1"));
  EXPECT_THAT(info.output, HasSubstr("\"threads\": 2"));
  EXPECT_THAT(same.output, Not(HasSubstr("profiled at")));
}

// A schedule file's costs edited after the solve (divided by 1000, a size set
// to 1 byte, made negative): check and train refuse it, naming what changed.
TEST_F(CliTest, CheckAndTrainRefuseAScheduleWhoseCostsWereEdited) {
  const std::string schedule = SolveLinearSchedule();
  ASSERT_FALSE(schedule.empty());
  ASSERT_EQ(Edgecost("check " + schedule).exit_code, 0);
  std::ifstream in(schedule);
  const nlohmann::json solved = nlohmann::json::parse(in);
  struct Edit {
    std::string name;
    std::function<void(nlohmann::json&)> apply;
    std::string expected;
  };
  const std::vector<Edit> edits = {
      {"divided by 1000",
       [](nlohmann::json& costs) {
         for (auto& cost : costs) cost["computeJ"] = cost.value("computeJ", 0.0) / 1000;
       },
       "changed: compute_j); its energy was"},
      {"1 byte", [](nlohmann::json& costs) { costs[2]["ramBytes"] = "1"; }, "changed: ram_bytes"},
      {"negative", [](nlohmann::json& costs) { costs[2]["computeJ"] = -5.0; }, "'compute_j' is -5"},
  };
  for (const Edit& edit : edits) {
    SCOPED_TRACE(edit.name);
    nlohmann::json edited = solved;
    edit.apply(edited["costTable"]["costs"]);
    const std::string path = (dir_ / "edited.json").string();
    std::ofstream(path) << edited.dump(1);
    const CommandResult check = Edgecost("check " + path);
    EXPECT_EQ(check.exit_code, 1) << check.output;
    EXPECT_THAT(check.output, HasSubstr(edit.expected));
    const CommandResult train = Edgecost("train --model linear --batch-size 2 --steps 1 --schedule " + path);
    EXPECT_EQ(train.exit_code, 1) << train.output;
    EXPECT_THAT(train.output, HasSubstr(edit.expected));
  }
}

// --csv: a header, then a row per node of the training graph in plain numbers.
TEST_F(CliTest, CostsAsCsv) {
  const CommandResult csv = Edgecost("costs linear --platform a72 --csv 2>/dev/null");
  ASSERT_EQ(csv.exit_code, 0) << csv.output;
  EXPECT_THAT(csv.output, ::testing::StartsWith("node,name,phase,runtime_s,compute_j,ram_bytes,"));
  EXPECT_THAT(csv.output, ::testing::ContainsRegex("\n0,[^,]+,forward,[0-9.e-]+,[0-9.e-]+,[0-9]+,"));
  EXPECT_EQ(Edgecost("costs linear --platform a72 --csv --json").exit_code, 2);
}

// A schedule written by solve runs for real; a tampered copy is refused before anything runs;
// the run is listed by `runs`.
TEST_F(CliTest, TrainRunsAScheduleAndRefusesATamperedOne) {
  const std::string schedule = SolveLinearSchedule();
  ASSERT_FALSE(schedule.empty());
  const std::string svg = (dir_ / "run.svg").string();
  const CommandResult run =
      Edgecost("train --model linear --batch-size 2 --schedule " + schedule +
               " --steps 3 --verify --threads 1 --paging-dir " + (dir_ / "paging").string() + " --svg " + svg);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_THAT(run.output, HasSubstr("1 thread,"));  // not "1 threads"
  // The plot: loss and step time over the three steps, a dot per step in each panel.
  std::ifstream svg_file(svg);
  const std::string plot((std::istreambuf_iterator<char>(svg_file)), std::istreambuf_iterator<char>());
  EXPECT_THAT(plot, ::testing::StartsWith("<svg "));
  EXPECT_THAT(plot, HasSubstr("Run #1: linear, batch 2, 3 steps"));
  size_t dots = 0;  // a dot, or an outlier's triangle at the step-time panel's top edge
  for (const char* mark : {"<circle", "<path class=\"outlier\""}) {
    for (size_t at = plot.find(mark); at != std::string::npos; at = plot.find(mark, at + 1)) ++dots;
  }
  EXPECT_EQ(dots, 6u) << plot;
  EXPECT_THAT(run.output, HasSubstr("ETA"));  // the step lines say when the run ends, as profile's do
  EXPECT_THAT(run.output, HasSubstr("peak activations"));
  EXPECT_THAT(run.output, HasSubstr("gradients bit-identical to the plain step's"));
  EXPECT_THAT(run.output, HasSubstr("ESTIMATED"));
  EXPECT_THAT(run.output, HasSubstr("stored         training run #1"));
  // The file holds the schedule solve stored: the run is linked to it.
  EXPECT_THAT(run.output, ::testing::ContainsRegex("schedule +optimal \\(#1\\)"));

  // The budget edited below the schedule's peak: refused, naming the stage, and nothing stored.
  std::ifstream in(schedule);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string budget = "\"activationBudgetBytes\": \"20000\"";
  const size_t at = text.find(budget);
  ASSERT_NE(at, std::string::npos) << text.substr(0, 400);
  text.replace(at, budget.size(), "\"activationBudgetBytes\": \"100\"");
  const std::string tampered = (dir_ / "tampered.json").string();
  std::ofstream(tampered) << text;
  const CommandResult refused = Edgecost("train --model linear --batch-size 2 --schedule " + tampered + " --steps 3");
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_THAT(refused.output, HasSubstr("schedule refused before running anything: stage "));

  const CommandResult runs = Edgecost("runs");
  ASSERT_EQ(runs.exit_code, 0) << runs.output;
  EXPECT_THAT(runs.output, HasSubstr("identical"));
  EXPECT_THAT(runs.output, HasSubstr("activations 20.0 kB"));  // the budget as the schedule was asked for
  EXPECT_THAT(runs.output, HasSubstr("energy predicted"));
  EXPECT_THAT(Edgecost("runs --json").output, HasSubstr("\"stepStats\""));
  const CommandResult csv = Edgecost("runs --csv");
  ASSERT_EQ(csv.exit_code, 0) << csv.output;
  EXPECT_THAT(csv.output, ::testing::StartsWith("run,model,batch_size,device,strategy,schedule_id,"));
  EXPECT_THAT(csv.output, ::testing::ContainsRegex("\n1,linear,2,[^,]*,optimal,1,3,"));
  const CommandResult nodes = Edgecost("runs --nodes 1 --limit 3");
  ASSERT_EQ(nodes.exit_code, 0) << nodes.output;
  EXPECT_THAT(nodes.output, HasSubstr("worst nodes first"));
  EXPECT_THAT(nodes.output, HasSubstr("miss/step"));
  EXPECT_EQ(Edgecost("runs --nodes 99").exit_code, 1);

  // The schedule the run used, listed as text and as CSV in plain SI numbers.
  const CommandResult schedules = Edgecost("schedules");
  ASSERT_EQ(schedules.exit_code, 0) << schedules.output;
  EXPECT_THAT(schedules.output,
              ::testing::ContainsRegex(
                  "\n1 +linear +a72 +poet-flops +optimal +activations 20.0 kB +3.00x +optimal \\(proven\\) +[0-9.]+ mJ ESTIMATED"));
  const CommandResult schedules_csv = Edgecost("schedules --csv");
  ASSERT_EQ(schedules_csv.exit_code, 0) << schedules_csv.output;
  EXPECT_THAT(schedules_csv.output,
              ::testing::StartsWith("schedule,model,device,cost_source,strategy,batch_size,activation_budget_bytes,"));
  EXPECT_THAT(schedules_csv.output, HasSubstr("\n1,linear,a72,poet-flops,optimal,2,20000,3,,0,"));
  EXPECT_EQ(Edgecost("schedules --csv --json").exit_code, 2);
  EXPECT_EQ(Edgecost("train --model linear --steps 0").exit_code, 2);
}

// The measured-in-step table is shown when asked for, and its energies, from the power model here, say ESTIMATED
// in costs and in the schedules solved on it.
TEST_F(CliTest, CostsAndSolveShowTheMeasuredInStepTableAsked) {
  const std::string no_sensors = "EDGECOST_SYSFS_ROOT=" + (dir_ / "no-sysfs").string() + " ";
  ASSERT_EQ(Run(no_sensors + "EDGECOST_DB=" + (dir_ / "costs.db").string() + " " + EDGECOST_BIN +
                " profile --model linear --batch-size 2 --threads 1 --min-window-s 0.005 --accept-noisy")
                .exit_code,
            0);
  const CommandResult trained = Run(no_sensors + "EDGECOST_DB=" + (dir_ / "costs.db").string() + " " + EDGECOST_BIN +
                                    " train --model linear --batch-size 2 --steps 3 --threads 1 --accept-noisy");
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const std::string costs = "costs linear --batch-size 2 --device this --threads 1 --summary";
  const CommandResult in_step = Edgecost(costs + " --source measured-in-step");
  ASSERT_EQ(in_step.exit_code, 0) << in_step.output;
  EXPECT_THAT(in_step.output, HasSubstr("cost source measured-in-step"));
  EXPECT_THAT(in_step.output, HasSubstr("J ESTIMATED"));
  const CommandResult measured = Edgecost(costs);
  ASSERT_EQ(measured.exit_code, 0) << measured.output;
  EXPECT_THAT(measured.output, HasSubstr("cost source measured,"));
  const CommandResult preset_source = Edgecost(costs + " --source poet-flops");
  EXPECT_EQ(preset_source.exit_code, 2) << preset_source.output;
  EXPECT_THAT(preset_source.output, HasSubstr("measured-in-step"));
  const CommandResult solved = Edgecost(
      "solve --model linear --batch-size 2 --device this --threads 1 --cost-source measured-in-step "
      "--activation-budget 1MB --no-store");
  ASSERT_EQ(solved.exit_code, 0) << solved.output;
  EXPECT_THAT(solved.output, ::testing::ContainsRegex("energy +[0-9.]+ [mun]?J ESTIMATED ="));
  // Stored, it is listed with its energy ESTIMATED, under the name the device list gives this machine.
  const CommandResult stored = Edgecost(
      "solve --model linear --batch-size 2 --device this --threads 1 --cost-source measured-in-step "
      "--activation-budget 1MB");
  ASSERT_EQ(stored.exit_code, 0) << stored.output;
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  const CommandResult listed = Edgecost("schedules");
  ASSERT_EQ(listed.exit_code, 0) << listed.output;
  EXPECT_THAT(listed.output, ::testing::ContainsRegex(std::string("\n1 +linear +") + host +
                                                      " +measured-in-step .* [0-9.]+ [mun]?J ESTIMATED"));
  EXPECT_THAT(listed.output, Not(HasSubstr(" this ")));
  EXPECT_THAT(Edgecost("schedules --csv").output, ::testing::ContainsRegex(",1,0,0,0\n$"));  // energy_estimated, superseded, no RAM budget, no percent
}

// A run measured on a busy machine is listed marked, with the reason; `train` takes --accept-noisy.
TEST_F(CliTest, RunsShowsADisturbedRun) {
  const CommandResult trained = Edgecost("train --model linear --batch-size 2 --steps 3 --threads 1 --accept-noisy");
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  {
    auto db = edgecost::costdb::CostDb::Open((dir_ / "costs.db").string());
    ASSERT_TRUE(db.ok()) << db.status().message();
    edgecost::v1::TrainRun run;
    run.set_model("linear");
    run.set_device("this");
    run.set_strategy("plain");
    run.set_batch_size(2);
    run.set_steps(5);
    run.set_disturbed(true);
    run.set_disturbed_steps(3);
    run.set_median_steps(4);
    run.set_disturbance("3 of 4 steps after the first were disturbed (step 2: its threads waited 1.00 s for a CPU)");
    ASSERT_TRUE(db->PutTrainRun(run).ok());
  }
  const CommandResult runs = Edgecost("runs");
  ASSERT_EQ(runs.exit_code, 0) << runs.output;
  EXPECT_THAT(runs.output, HasSubstr("disturbed"));
  EXPECT_THAT(runs.output, HasSubstr("DISTURBED 3/4"));
  EXPECT_THAT(runs.output, HasSubstr("run 2 DISTURBED: 3 of 4 steps after the first were disturbed"));
  EXPECT_THAT(Edgecost("runs --json").output, HasSubstr("\"disturbed\": true"));
}

// A paging directory that fills up (a 4 KiB tmpfs in a mount namespace of its own) fails the
// run with the reason, stores no run record and leaves no paging file.
TEST_F(CliTest, AFullPagingDirectoryFailsTheRunAndStoresNothing) {
  const std::filesystem::path paging = dir_ / "paging";
  std::filesystem::create_directories(paging);
  const std::string schedule = (dir_ / "s.json").string();
  ASSERT_EQ(Edgecost("solve --model linear --platform a72 --derivation exact --batch-size 2 --activation-budget 1GB "
                     "--runtime-budget 3x --strategy paging-only --out " +
                     schedule)
                .exit_code,
            0);
  const std::string train = "EDGECOST_DB=" + (dir_ / "costs.db").string() + " " + EDGECOST_BIN +
                            " train --model linear --batch-size 2 --steps 2 --schedule " + schedule + " --paging-dir " +
                            paging.string();
  const CommandResult run = Run("unshare -m sh -c 'mount -t tmpfs -o size=4k tmpfs " + paging.string() + " && " +
                                train + "; echo exit=$?; ls -A " + paging.string() + "'");
  if (run.output.find("exit=") == std::string::npos) {
    GTEST_SKIP() << "no tmpfs mount here (needs root and mount namespaces): " << run.output;
  }
  EXPECT_THAT(run.output, HasSubstr("exit=1"));
  EXPECT_THAT(run.output, HasSubstr("No space left on device"));
  EXPECT_THAT(run.output.substr(run.output.find("exit=")), Not(HasSubstr(".page")));
  EXPECT_THAT(Edgecost("runs").output, HasSubstr("no training runs"));
}

namespace {

// Every input `solve` takes, each with every strategy, --json, --compare and
// --min-ram without --activation-budget: the zoo, a training-graph/v1 file, networkx
// node-link, ONNX and measured costs. One test per input.
class SolveInputTest : public CliTest {
 protected:
  void SolveEveryWay(const std::string& input, const std::string& budget) {
    for (const char* strategy : {"optimal", "greedy", "checkpoint-all", "sqrt", "revolve", "paging-only"}) {
      const CommandResult run = Edgecost("solve " + input + " --activation-budget " + budget +
                                         " --runtime-budget 2x --time-limit-s 2 --strategy " + strategy);
      // A baseline may miss the budget (exit 1), but says so; none fails for the input's sake.
      EXPECT_THAT(run.output, ::testing::AnyOf(HasSubstr("energy "), HasSubstr("does not meet these budgets")))
          << strategy << ": " << run.output;
      EXPECT_THAT(run.output, ::testing::Not(HasSubstr("error"))) << strategy;
    }
    const CommandResult json =
        Edgecost("solve " + input + " --activation-budget " + budget + " --runtime-budget 2x --time-limit-s 2 --json");
    ASSERT_EQ(json.exit_code, 0) << json.output;
    EXPECT_THAT(json.output, HasSubstr("\"status\": \"STATUS_"));
    EXPECT_THAT(json.output, HasSubstr("\"foundBy\""));
    const CommandResult compare = Edgecost("solve " + input + " --activation-budget " + budget +
                                           " --runtime-budget 2x --time-limit-s 2 --compare");
    ASSERT_EQ(compare.exit_code, 0) << compare.output;
    for (const char* strategy : {"checkpoint-all", "sqrt", "revolve", "paging-only", "greedy"}) {
      EXPECT_THAT(compare.output, HasSubstr(strategy));
    }
    EXPECT_THAT(compare.output, ::testing::Not(HasSubstr("+-")));
    const CommandResult min_ram = Edgecost("solve " + input + " --runtime-budget 2x --time-limit-s 2 --min-ram");
    ASSERT_EQ(min_ram.exit_code, 0) << min_ram.output;
    EXPECT_THAT(min_ram.output, HasSubstr("smallest       activation budget"));
    EXPECT_THAT(min_ram.output, HasSubstr("energy "));
  }
};

TEST_F(SolveInputTest, ZooModel) { SolveEveryWay("--model linear --platform a72", "5kB"); }

TEST_F(SolveInputTest, TrainingGraphFile) {
  const std::string file = (dir_ / "linear.json").string();
  ASSERT_EQ(Edgecost("costs linear --platform m4 --out " + file + " --summary").exit_code, 0);
  SolveEveryWay("--graph " + file, "5kB");
}

TEST_F(SolveInputTest, NetworkxNodeLink) {
  const std::string file = (dir_ / "chain.json").string();
  std::ofstream(file) << R"({"directed": true, "graph": {"name": "chain"}, "nodes": [
    {"id": 0, "cost_cpu": 1.0, "cost_ram": 100}, {"id": 1, "cost_cpu": 2.0, "cost_ram": 50},
    {"id": 2, "cost_cpu": 1.0, "cost_ram": 60}, {"id": 3, "cost_cpu": 2.5, "cost_ram": 80, "backward": true},
    {"id": 4, "cost_cpu": 1.5, "cost_ram": 80, "backward": true}],
    "links": [{"source": 0, "target": 1}, {"source": 1, "target": 2}, {"source": 2, "target": 3},
              {"source": 1, "target": 3}, {"source": 3, "target": 4}, {"source": 0, "target": 4}]})";
  SolveEveryWay("--graph " + file, "300B");
}

TEST_F(SolveInputTest, OnnxModel) { SolveEveryWay("--model tests/graph/data/mlp.onnx --platform a72", "2kB"); }

TEST_F(SolveInputTest, MeasuredCosts) {
  // About the solve inputs, not about how quiet the machine is.
  const CommandResult profile = Edgecost("profile --model linear --threads 1 --min-window-s 0.002 --accept-noisy");
  ASSERT_EQ(profile.exit_code, 0) << profile.output;
  SolveEveryWay("--model linear --device this --threads 1", "6kB");
}

// A model imported once is named like a zoo model: every way to solve works on it, as on the file.
TEST_F(SolveInputTest, StoredOnnxModel) {
  ASSERT_EQ(Edgecost("models add tests/graph/data/mlp.onnx --name mlp-rec").exit_code, 0);
  SolveEveryWay("--model mlp-rec --platform a72", "2kB");
}

TEST_F(SolveInputTest, StoredNodeLinkGraph) {
  const std::string file = (dir_ / "chain.json").string();
  std::ofstream(file) << R"({"directed": true, "graph": {"name": "chain"}, "nodes": [
    {"id": 0, "cost_cpu": 1.0, "cost_ram": 100}, {"id": 1, "cost_cpu": 2.0, "cost_ram": 50},
    {"id": 2, "cost_cpu": 1.5, "cost_ram": 80, "backward": true}],
    "links": [{"source": 0, "target": 1}, {"source": 1, "target": 2}, {"source": 0, "target": 2}]})";
  const CommandResult add = Edgecost("models add " + file + " --name chain");
  ASSERT_EQ(add.exit_code, 0) << add.output;
  EXPECT_THAT(add.output, HasSubstr("node-link"));
  SolveEveryWay("--model chain", "300B");
  const CommandResult profile = Edgecost("profile --model chain");
  EXPECT_EQ(profile.exit_code, 1);
  EXPECT_THAT(profile.output, HasSubstr("its own costs"));
}

// Models as records: `models add` stores the file under a name and its hash; the name then
// works like a zoo model's in graph, costs, profile (with a batch size), solve, check and train.
TEST_F(CliTest, AStoredModelIsNamedLikeAZooModelEverywhere) {
  const std::string onnx = "tests/graph/data/mlp.onnx";
  const CommandResult add = Edgecost("models add " + onnx + " --name mlp-rec");
  ASSERT_EQ(add.exit_code, 0) << add.output;
  EXPECT_THAT(add.output, HasSubstr("added          mlp-rec (onnx"));
  const CommandResult same = Edgecost("models add " + onnx + " --name mlp-rec");
  EXPECT_EQ(same.exit_code, 0) << same.output;
  EXPECT_THAT(same.output, HasSubstr("unchanged"));
  EXPECT_THAT(same.output, HasSubstr("nothing to do"));
  const CommandResult other = Edgecost("models add tests/graph/data/small_resnet.onnx --name mlp-rec");
  EXPECT_EQ(other.exit_code, 1) << other.output;
  EXPECT_THAT(other.output, HasSubstr("--replace"));
  const CommandResult zoo = Edgecost("models add " + onnx + " --name resnet18_cifar");
  EXPECT_EQ(zoo.exit_code, 1);
  EXPECT_THAT(zoo.output, HasSubstr("is a zoo model"));
  const std::string junk = (dir_ / "junk.onnx").string();
  std::ofstream(junk) << "not a model at all";
  const CommandResult bad = Edgecost("models add " + junk + " --name junk");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_THAT(bad.output, HasSubstr("not an ONNX model"));
  const std::string empty = (dir_ / "empty.onnx").string();
  std::ofstream(empty).close();
  EXPECT_THAT(Edgecost("models add " + empty + " --name empty").output, HasSubstr("is empty"));
  EXPECT_THAT(Edgecost("models add " + onnx + " --name ''").output, HasSubstr("a name is required"));
  EXPECT_THAT(Edgecost("models add " + onnx + " --name ../x.onnx").output, HasSubstr("is a file name"));

  const CommandResult list = Edgecost("models");
  ASSERT_EQ(list.exit_code, 0) << list.output;
  EXPECT_THAT(list.output, HasSubstr("mlp-rec"));
  EXPECT_THAT(list.output, HasSubstr("resnet18_cifar"));
  EXPECT_THAT(Edgecost("models --json").output, HasSubstr("\"stored\": true"));

  EXPECT_THAT(Edgecost("graph mlp-rec").output, HasSubstr("mlp-rec: "));
  EXPECT_THAT(Edgecost("graph mlp-rec --batch-size 8").output, HasSubstr("batch size 8"));
  const CommandResult costs = Edgecost("costs mlp-rec --platform a72 --summary");
  ASSERT_EQ(costs.exit_code, 0) << costs.output;
  EXPECT_THAT(costs.output, HasSubstr("model          mlp-rec"));
  const CommandResult profile =
      Edgecost("profile --model mlp-rec --batch-size 1 --threads 1 --min-window-s 0.002 --accept-noisy");
  ASSERT_EQ(profile.exit_code, 0) << profile.output;
  EXPECT_THAT(profile.output, HasSubstr("profiled       mlp-rec"));
  EXPECT_EQ(Edgecost("costs mlp-rec --device this --threads 1 --summary").exit_code, 0);
  const std::string schedule = (dir_ / "s.json").string();
  const CommandResult solve = Edgecost(
      "solve --model mlp-rec --device this --threads 1 --min-ram --runtime-budget 2x --time-limit-s 2 --out " +
      schedule);
  ASSERT_EQ(solve.exit_code, 0) << solve.output;
  EXPECT_EQ(Edgecost("check " + schedule).exit_code, 0);
  const CommandResult train = Edgecost("train --model mlp-rec --steps 2 --threads 1 --schedule " + schedule);
  ASSERT_EQ(train.exit_code, 0) << train.output;
  EXPECT_THAT(train.output, HasSubstr("trained        mlp-rec"));

  // Replaced: the old model's measured costs are no longer served for the name.
  ASSERT_EQ(Edgecost("models add tests/graph/data/small_resnet.onnx --name mlp-rec --replace").exit_code, 0);
  EXPECT_EQ(Edgecost("costs mlp-rec --device this --summary").exit_code, 1);
  const CommandResult removed = Edgecost("models remove mlp-rec");
  ASSERT_EQ(removed.exit_code, 0) << removed.output;
  const CommandResult gone = Edgecost("graph mlp-rec");
  EXPECT_EQ(gone.exit_code, 1);
  EXPECT_THAT(gone.output, HasSubstr("models add"));
  EXPECT_EQ(Edgecost("models remove mlp-rec").exit_code, 1);
  EXPECT_EQ(Edgecost("models remove linear").exit_code, 1);
}

// The whole memory of a step: the plain step's activation peak (below the sum of the forward
// outputs) next to parameters, gradients, optimizer state and workspace; --ram-budget takes
// the fixed parts off a whole-process budget and refuses one they alone exceed.
TEST_F(CliTest, CostsAndSolveShowTheWholeMemoryAndDeviceRamLeavesTheFixedPartsOut) {
  const CommandResult costs = Edgecost("costs resnet18_cifar --platform a72 --summary");
  ASSERT_EQ(costs.exit_code, 0) << costs.output;
  EXPECT_THAT(costs.output, HasSubstr("plain step     peak"));
  EXPECT_THAT(costs.output, HasSubstr("whole memory"));
  EXPECT_THAT(costs.output, HasSubstr("optimizer state 0 B"));
  // Byte counts are 64-bit, which protobuf's JSON mapping writes as strings.
  const auto bytes = [](const nlohmann::json& field) -> uint64_t {
    return field.is_string() ? std::stoull(field.get<std::string>()) : 0;
  };
  const nlohmann::json memory = Json("costs resnet18_cifar --platform a72")["memory"];
  const uint64_t peak = bytes(memory["activationPeakBytes"]);
  const uint64_t total = bytes(memory["activationTotalBytes"]);
  const uint64_t fixed = bytes(memory["fixedBytes"]);
  const uint64_t params = bytes(memory["paramBytes"]);
  ASSERT_GT(peak, 0u) << memory;
  EXPECT_LT(peak, total) << memory;  // the plain step frees what no later node reads
  EXPECT_GT(params, 0u);
  EXPECT_GT(bytes(memory["workspaceBytes"]), 0u) << memory;  // batch-norm statistics, pooling argmax
  EXPECT_EQ(bytes(memory["gradientBytes"]), params) << memory;
  EXPECT_EQ(fixed, params + bytes(memory["gradientBytes"]) + bytes(memory["workspaceBytes"]));

  const uint64_t device_ram = fixed + peak / 2;
  const nlohmann::json solve = Json("solve --model resnet18_cifar --platform a72 --ram-budget " +
                                    std::to_string(device_ram) + "B --runtime-budget 2x --time-limit-s 2");
  EXPECT_EQ(bytes(solve["request"]["activationBudgetBytes"]), peak / 2) << "the activations get what the fixed parts leave";
  EXPECT_EQ(bytes(solve["request"]["processRamBudgetBytes"]), device_ram);
  EXPECT_LE(bytes(solve["peakRamBytes"]), peak / 2);
  const CommandResult text = Edgecost("solve --model resnet18_cifar --platform a72 --ram-budget " +
                                      std::to_string(device_ram) + "B --runtime-budget 2x --time-limit-s 2");
  // The problem line names the RAM budget as given, not the activation budget derived from it.
  EXPECT_THAT(text.output, ::testing::ContainsRegex("nodes, RAM budget [0-9.]+ [kMG]B \\(" + std::to_string(device_ram) +
                                                    " B\\) \\(activation budget"));
  EXPECT_THAT(text.output, HasSubstr("(this schedule's peak)"));
  // The old spelling of --ram-budget still works, with a warning that names the new one.
  const CommandResult old_flag = Edgecost("solve --model resnet18_cifar --platform a72 --device-ram " +
                                          std::to_string(device_ram) + "B --runtime-budget 2x --time-limit-s 2 --no-store");
  EXPECT_EQ(old_flag.exit_code, 0) << old_flag.output;
  EXPECT_THAT(old_flag.output, HasSubstr("`solve --device-ram` is deprecated; use --ram-budget"));

  const CommandResult tight = Edgecost("solve --model resnet18_cifar --platform a72 --ram-budget " +
                                       std::to_string(fixed) + "B --runtime-budget 2x");
  EXPECT_EQ(tight.exit_code, 1) << tight.output;
  EXPECT_THAT(tight.output, HasSubstr("fixed parts alone"));
  EXPECT_THAT(tight.output, HasSubstr("no room is left for activations"));
  EXPECT_EQ(Edgecost("solve --model resnet18_cifar --ram-budget 1TB --activation-budget 1MB").exit_code, 2);
  const nlohmann::json tera = Json("solve --model linear --platform a72 --ram-budget 1TiB --no-store");
  EXPECT_EQ(bytes(tera["request"]["processRamBudgetBytes"]), 1099511627776u);
}

// A sparse layer update: the named layers get weight gradients, the others none, and a name that
// names no layer with parameters is refused with some that do.
TEST_F(CliTest, ASparseLayerUpdateTrainsTheNamedLayersAlone) {
  const nlohmann::json graph = Json("graph linear --trainable layers:layer5,layer3,layer5");
  EXPECT_EQ(graph["trainable"], "layers:layer3,layer5");
  std::vector<std::string> weight_gradients;
  for (const nlohmann::json& node : graph["nodes"]) {
    if (node.value("role", "") == "grad_weight") weight_gradients.push_back(node["name"]);
  }
  EXPECT_EQ(weight_gradients, (std::vector<std::string>{"layer5_LinearLayer.grad_weight",
                                                        "layer3_LinearLayer.grad_weight"}));
  const CommandResult unknown = Edgecost("graph linear --trainable layers:layer2");
  EXPECT_EQ(unknown.exit_code, 1) << unknown.output;
  EXPECT_THAT(unknown.output, HasSubstr("'layer2' names no layer with parameters"));
  EXPECT_THAT(Edgecost("train --help").output, HasSubstr("layers:NAME"));
}

// Updates as gradients arrive through the front end: the schedule plans weight gradients as
// activations and says so, train runs it to the losses of the update after the step, and a schedule
// solved without it is refused for such a run.
TEST_F(CliTest, UpdatesInTheBackwardPassAreSolvedForAndTrained) {
  const std::string after = SolveLinearSchedule();
  const std::string in_backward = (dir_ / "in_backward.json").string();
  const CommandResult solved = Edgecost(
      "solve --model linear --platform a72 --derivation exact --batch-size 2 --activation-budget 120kB "
      "--runtime-budget 3x --time-limit-s 5 --update-in-backward --out " + in_backward);
  ASSERT_EQ(solved.exit_code, 0) << solved.output;
  EXPECT_THAT(solved.output, HasSubstr("updates        in the backward pass"));
  EXPECT_THAT(solved.output, HasSubstr("held with the activations until each layer's update"));
  const std::string train = "train --model linear --batch-size 2 --steps 3 --threads 1 --optimizer adam --lr 0.01 ";
  const CommandResult plain = Edgecost(train + "--schedule " + after);
  const CommandResult run = Edgecost(train + "--schedule " + in_backward);
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const std::regex loss("step 3/3  loss ([0-9.]+)");
  std::smatch a, b;
  ASSERT_TRUE(std::regex_search(plain.output, a, loss) && std::regex_search(run.output, b, loss)) << run.output;
  EXPECT_EQ(a[1], b[1]);
  const CommandResult refused = Edgecost(train + "--update-in-backward --schedule " + after);
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_THAT(refused.output, HasSubstr("solve it again with --update-in-backward"));
}

TEST_F(CliTest, SolveTakesTerabytes) {
  const nlohmann::json run =
      Json("solve --model linear --platform a72 --activation-budget 1TiB --runtime-budget 1x --no-store");
  EXPECT_EQ(run["request"]["activationBudgetBytes"], "1099511627776");
}

}  // namespace

namespace {

// A solve stopped by its time limit: progress lines while it runs (on stderr
// when stdout is JSON), a gap with its absolute bound, an SVG titled
// "feasible", and a failed solve writes no file.
TEST_F(CliTest, ALongSolveShowsProgressAndItsGap) {
  const std::string svg = (dir_ / "s.svg").string();
  const std::string args =
      "solve --model resnet18_cifar --platform a72 --activation-budget 1.5MB --runtime-budget 1.5x --time-limit-s 2.5 ";
  const CommandResult text = Edgecost(args + "--svg " + svg);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_THAT(text.output, HasSubstr("progress       "));
  EXPECT_THAT(text.output, ::testing::ContainsRegex("feasible: at most [0-9.]+% above optimal \\([0-9.]+ [mun]?J\\)"));
  std::ifstream in(svg);
  const std::string picture((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(picture, HasSubstr("Best schedule found in the time limit (not proven optimal)"));

  const std::string err = (dir_ / "err.txt").string();
  const CommandResult json =
      Run("(EDGECOST_DB='" + (dir_ / "costs.db").string() + "' " + EDGECOST_BIN + " " + args + "--json 2>" + err + ")");
  ASSERT_EQ(json.exit_code, 0) << json.output;
  EXPECT_EQ(json.output.substr(0, 1), "{") << json.output;  // stdout is one JSON document
  EXPECT_THAT(json.output, ::testing::Not(HasSubstr("progress")));
  std::ifstream err_in(err);
  const std::string progress((std::istreambuf_iterator<char>(err_in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(progress, HasSubstr("progress       "));

  const std::string out = (dir_ / "none.json").string();
  const CommandResult failed =
      Edgecost("solve --model resnet18_cifar --platform a72 --activation-budget 100kB --out " + out);
  EXPECT_EQ(failed.exit_code, 1) << failed.output;
  EXPECT_FALSE(std::filesystem::exists(out)) << "a failed solve wrote " << out;
}

// Fine-tuning on real data (scikit-learn's 8x8 handwritten digits): a small CNN pretrained for one
// epoch in PyTorch is fine-tuned here on other digits under a schedule for half its plain activation
// peak, reaches 95% on 300 digits it never saw, and PyTorch, given the written weights, measures the
// same accuracy. Skipped, with the reason, where Debian's PyTorch or scikit-learn is missing.
TEST_F(CliTest, FineTunesOnRealDigitsUnderHalfItsActivationPeak) {
  const std::string data = (dir_ / "digits").string();
  const CommandResult prepared = Run("/usr/bin/python3 tests/train/digits.py prepare " + data);
  if (prepared.exit_code == 3 || prepared.exit_code == 127) GTEST_SKIP() << prepared.output.substr(0, 300);
  ASSERT_EQ(prepared.exit_code, 0) << prepared.output;
  const std::string model = "--model " + data + "/digits_cnn.onnx --batch-size 32 --threads 1";

  const CommandResult plain = EdgecostStdout("train " + model + " --steps 1 --no-store --json");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  const nlohmann::json plain_run = nlohmann::json::parse(plain.output, nullptr, false);
  ASSERT_FALSE(plain_run.is_discarded()) << plain.output;
  // Protobuf's JSON writes 64-bit integers as strings.
  auto uint64_of = [](const nlohmann::json& run, const char* key) {
    return run.contains(key) ? std::stoull(run[key].is_string() ? run[key].get<std::string>() : run[key].dump()) : 0;
  };
  const uint64_t plain_peak = uint64_of(plain_run, "peakActivationBytes");
  ASSERT_GT(plain_peak, 0u) << plain.output;
  const CommandResult profiled = Edgecost("profile " + model + " --accept-noisy");
  ASSERT_EQ(profiled.exit_code, 0) << profiled.output;

  const uint64_t budget = plain_peak / 2;
  const std::string out = (dir_ / "tuned.onnx").string();
  const CommandResult tuned = EdgecostStdout("train " + model + " --data " + data + "/finetune.npz --val-data " + data +
                                             "/heldout.npz --epochs 3 --lr 0.05 --activation-budget " +
                                             std::to_string(budget) + "B --out " + out + " --json");
  ASSERT_EQ(tuned.exit_code, 0) << tuned.output;
  const nlohmann::json run = nlohmann::json::parse(tuned.output, nullptr, false);
  ASSERT_FALSE(run.is_discarded()) << tuned.output;
  EXPECT_NE(run.value("strategy", ""), "plain");
  EXPECT_LE(uint64_of(run, "peakActivationBytes"), budget);
  ASSERT_EQ(run["epochs"].size(), 3u) << tuned.output;
  const double accuracy = run["epochs"].back().value("heldOutAccuracy", 0.0);
  EXPECT_GE(accuracy, 0.95);
  EXPECT_EQ(uint64_of(run, "heldOutRecords"), 300u);

  const CommandResult in_torch =
      Run("/usr/bin/python3 tests/train/digits.py accuracy " + data + " " + (dir_ / "tuned.npz").string());
  ASSERT_EQ(in_torch.exit_code, 0) << in_torch.output;
  EXPECT_NEAR(std::stod(in_torch.output), accuracy, 0.5 / 300)
      << "PyTorch and edgecost disagree on the held-out digits";
}

// A sparse update chosen under a budget on a transfer task (a CNN pretrained on the digits 0-4,
// fine-tuned on the 5-9s): the probe ranks the new head first, the choice holds its budget, and
// training the chosen layers alone learns the new digits. A scores file replaces the probe, and
// names only layers the model has.
TEST_F(CliTest, ChoosesASparseUpdateUnderItsBudgetOnRealDigits) {
  const std::string data = (dir_ / "digits").string();
  const CommandResult prepared = Run("/usr/bin/python3 tests/train/digits.py prepare " + data + " --split classes");
  if (prepared.exit_code == 3 || prepared.exit_code == 127) GTEST_SKIP() << prepared.output.substr(0, 300);
  ASSERT_EQ(prepared.exit_code, 0) << prepared.output;
  const std::string args = "--model " + data + "/digits_cnn.onnx --batch-size 32 --threads 1 --data " + data +
                           "/finetune.npz --val-data " + data + "/heldout.npz --optimizer adamw --lr 0.003 ";
  const CommandResult chosen = EdgecostStdout("choose-update " + args + "--memory-budget 60% --json");
  ASSERT_EQ(chosen.exit_code, 0) << chosen.output;
  const nlohmann::json choice = nlohmann::json::parse(chosen.output, nullptr, false);
  ASSERT_FALSE(choice.is_discarded()) << chosen.output;
  const auto bytes = [&](const char* key) { return std::stoull(choice[key].get<std::string>()); };
  EXPECT_LE(bytes("chosenBytes"), bytes("budgetBytes"));
  EXPECT_EQ(bytes("budgetBytes"), bytes("fullUpdateBytes") * 60 / 100);
  EXPECT_EQ(choice["candidates"][0]["layer"], "classifier") << chosen.output;
  const std::string trainable = choice["trainable"];
  EXPECT_THAT(trainable, HasSubstr("classifier"));
  const CommandResult trained =
      EdgecostStdout("train " + args + "--epochs 3 --no-store --json --trainable " + trainable);
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const nlohmann::json run = nlohmann::json::parse(trained.output, nullptr, false);
  ASSERT_FALSE(run.is_discarded()) << trained.output;
  EXPECT_GE(run["epochs"].back().value("heldOutAccuracy", 0.0), 0.9);

  // The choice as a file that --trainable @FILE reads.
  const std::string file = (dir_ / "chosen.txt").string();
  ASSERT_EQ(Edgecost("choose-update " + args + "--memory-budget 60% --out " + file).exit_code, 0);
  EXPECT_EQ(Json("graph " + data + "/digits_cnn.onnx --trainable @" + file)["trainable"], trainable);
  const CommandResult missing = Edgecost("graph " + data + "/digits_cnn.onnx --trainable @" + file + ".gone");
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_THAT(missing.output, HasSubstr("cannot read the file"));

  const std::string scores = (dir_ / "scores.csv").string();
  std::ofstream(scores) << "# layer,score\nfeatures.10,2\nclassifier,1\n";
  const CommandResult given = Edgecost("choose-update " + args + "--memory-budget 100% --scores " + scores);
  ASSERT_EQ(given.exit_code, 0) << given.output;
  EXPECT_THAT(given.output, HasSubstr("--trainable layers:classifier,features.10"));
  EXPECT_THAT(given.output, HasSubstr("no: no score in"));
  std::ofstream(scores) << "features.99,1\n";
  const CommandResult unknown = Edgecost("choose-update " + args + "--memory-budget 100% --scores " + scores);
  EXPECT_EQ(unknown.exit_code, 1) << unknown.output;
  EXPECT_THAT(unknown.output, HasSubstr("'features.99' is no layer with parameters"));
  const CommandResult tight = Edgecost("choose-update " + args + "--ram-budget 10%");
  EXPECT_EQ(tight.exit_code, 1) << tight.output;
  EXPECT_THAT(tight.output, HasSubstr("the least any layer alone needs is"));
  // The step's memory was once --ram-budget here, which is the process's peak RSS elsewhere: still read.
  EXPECT_THAT(tight.output, HasSubstr("`choose-update --ram-budget` is deprecated; use --memory-budget"));

  // On measured costs, a runtime budget lets a schedule hold the set's activations: the step's time
  // and energy are named, and the line to train it.
  const CommandResult unmeasured = Edgecost("choose-update " + args + "--memory-budget 60% --runtime-budget 3");
  EXPECT_EQ(unmeasured.exit_code, 1) << unmeasured.output;
  EXPECT_THAT(unmeasured.output, HasSubstr("needs the device's measured costs"));
  ASSERT_EQ(Edgecost("profile --model " + data + "/digits_cnn.onnx --batch-size 32 --threads 1 --accept-noisy").exit_code, 0);
  const CommandResult scheduled = Edgecost("choose-update " + args + "--memory-budget 60% --runtime-budget 3 --shares none");
  ASSERT_EQ(scheduled.exit_code, 0) << scheduled.output;
  EXPECT_THAT(scheduled.output, ::testing::ContainsRegex("step +[0-9.]+ [mu]s, [0-9.]+ [mu]J \\(the full update: "));
  EXPECT_THAT(scheduled.output, ::testing::ContainsRegex("train with +--trainable layers:classifier[^ ]* --activation-budget [0-9]+B --runtime-budget [0-9.]+ms"));
}

// A run killed with SIGKILL between or during checkpoints resumes with --resume and ends at the
// weights of a run that was never stopped, bit for bit (the final checkpoints' tensors compared);
// a checkpoint of other settings is refused, naming them.
TEST_F(CliTest, TrainResumesAfterKillToTheSameWeights) {
  const std::string args =
      "train --model resnet18_cifar --batch-size 2 --threads 1 --steps 24 --optimizer sgd --momentum 0.9 "
      "--lr-schedule cosine --no-store --checkpoint-every 3 --checkpoint ";
  const std::string whole = (dir_ / "whole.ckpt").string(), cut = (dir_ / "cut.ckpt").string();
  ASSERT_EQ(Edgecost(args + whole).exit_code, 0);

  // Killed once the first checkpoint is there, wherever the run is then.
  const CommandResult started = Run("EDGECOST_DB='" + (dir_ / "costs.db").string() + "' " + EDGECOST_BIN + " " + args +
                                    cut + " >/dev/null 2>&1 & echo $!");
  const pid_t pid = std::stoi(started.output);
  for (int i = 0; i < 6000 && !std::filesystem::exists(cut); ++i) ::usleep(10'000);
  ASSERT_TRUE(std::filesystem::exists(cut)) << "no checkpoint written";
  ::kill(pid, SIGKILL);
  while (::kill(pid, 0) == 0) ::usleep(10'000);
  edgecost::v1::TrainCheckpoint at_kill;
  {
    std::ifstream in(cut, std::ios::binary);
    ASSERT_TRUE(at_kill.ParseFromIstream(&in));
  }
  EXPECT_LT(at_kill.steps_done(), 24u) << "the run finished before it was killed";

  const CommandResult resumed = Edgecost(args + cut + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_THAT(resumed.output, HasSubstr("resuming at step " + std::to_string(at_kill.steps_done() + 1)));
  edgecost::v1::TrainCheckpoint a, b;
  std::ifstream in_a(whole, std::ios::binary), in_b(cut, std::ios::binary);
  ASSERT_TRUE(a.ParseFromIstream(&in_a) && b.ParseFromIstream(&in_b));
  EXPECT_EQ(a.steps_done(), 24u);
  EXPECT_EQ(b.steps_done(), 24u);
  ASSERT_EQ(a.tensors_size(), b.tensors_size());
  ASSERT_GT(a.tensors_size(), 40);  // parameters, running statistics and batch counts, momentum buffers
  for (int i = 0; i < a.tensors_size(); ++i) {
    EXPECT_EQ(a.tensors(i).name(), b.tensors(i).name());
    EXPECT_TRUE(a.tensors(i).float32_le() == b.tensors(i).float32_le() && a.tensors(i).count() == b.tensors(i).count())
        << a.tensors(i).name() << " differs";
  }
  ASSERT_EQ(b.run().step_stats_size(), 24);  // the record of the steps before the kill came through

  const CommandResult finished = Edgecost(args + cut + " --resume");
  EXPECT_EQ(finished.exit_code, 1);
  EXPECT_THAT(finished.output, HasSubstr("holds a finished run"));
  const CommandResult other = Edgecost(
      "train --model resnet18_cifar --batch-size 2 --threads 1 --steps 24 --optimizer adam --no-store --checkpoint " +
      whole + " --resume");
  EXPECT_EQ(other.exit_code, 1);
  EXPECT_THAT(other.output, HasSubstr("other settings"));
  EXPECT_THAT(other.output, HasSubstr("optimizer"));
}

}  // namespace

namespace edgecost {
namespace {

class DefaultPathTest : public edgecost::testing::TempDirTest {};

// Issue 39: the user's default path. One plain `profile` measures the ops, then plain training
// steps in a training process of its own (`edgecost train` as a child) whose node times are the
// default table and whose process predicts the peak RSS: the first `train` after it is predicted,
// memory included; a schedule solved for another optimizer's state is refused. An agent's profile
// and train jobs run their steps in processes of their own too.
TEST_F(DefaultPathTest, TheFirstTrainAfterOnePlainProfileIsPredictedMemoryIncluded) {
  const std::string db = "EDGECOST_DB='" + (dir_ / "costs.db").string() + "' " + EDGECOST_BIN + " ";
  const auto run = [&](const std::string& args) { return edgecost::testing::RunShell(db + args); };
  const CommandResult profiled = run("profile --model linear --batch-size 2 --threads 1 --min-window-s 0.005");
  ASSERT_EQ(profiled.exit_code, 0) << profiled.output;
  EXPECT_THAT(profiled.output, HasSubstr("in a training process of their own"));
  EXPECT_THAT(profiled.output, HasSubstr("(source measured-in-step"));
  EXPECT_THAT(profiled.output, HasSubstr("paging measured inside the steps"));

  const CommandResult trained = edgecost::testing::RunShell("{ " + db + "train --model linear --batch-size 2 "
                                                                 "--threads 1 --steps 4 --json 2>/dev/null; }");
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  v1::TrainRun first;
  ASSERT_TRUE(proto::FromJson(trained.output, &first).ok()) << trained.output;
  EXPECT_EQ(first.cost_source(), "measured-in-step");
  EXPECT_TRUE(first.peak_reset_at_start());
  EXPECT_NE(first.process_rest_from_run(), 0u) << "the profile's steps measured the rest of a training process";
  EXPECT_GT(first.predicted_process_bytes(), first.arena_bytes() + first.layer_state_bytes());
  EXPECT_GT(first.process_rest_bytes(), 0u);  // the binary and its libraries at least

  // A process budget solved for plain SGD does not hold AdamW's state: refused, saying how to solve.
  const uint64_t budget = first.predicted_process_bytes() + (1u << 20);
  const CommandResult solved = run("solve --model linear --batch-size 2 --device this --threads 1 --ram-budget " +
                                   std::to_string(budget) + "B --out " + (dir_ / "s.json").string());
  ASSERT_EQ(solved.exit_code, 0) << solved.output;
  EXPECT_THAT(solved.output, HasSubstr("rest of the process"));
  const CommandResult heavier = run("train --model linear --batch-size 2 --threads 1 --steps 2 --optimizer adamw "
                                    "--schedule " + (dir_ / "s.json").string());
  EXPECT_EQ(heavier.exit_code, 1) << heavier.output;
  EXPECT_THAT(heavier.output, HasSubstr("--optimizer adamw"));

  // The agent: its profile job's steps and its train job run in processes of their own.
  const std::string socket = (dir_ / "agent.sock").string();
  const pid_t agent = ::fork();
  if (agent == 0) {
    const std::string path = (dir_ / "agent.db").string();
    ::freopen((dir_ / "agent.log").c_str(), "w", stderr);
    ::execl(EDGECOST_BIN, EDGECOST_BIN, "--db", path.c_str(), "serve", "--socket", socket.c_str(),
            static_cast<char*>(nullptr));
    ::_exit(127);
  }
  while (!std::filesystem::exists(socket)) ::usleep(20000);  // the test's timeout bounds a daemon that never starts
  const std::string remote = std::string(EDGECOST_BIN) + " --remote unix:" + socket + " ";
  const CommandResult remote_profile =
      edgecost::testing::RunShell(remote + "profile --model linear --batch-size 2 --threads 1");
  EXPECT_EQ(remote_profile.exit_code, 0) << remote_profile.output;
  const CommandResult remote_train =
      edgecost::testing::RunShell(remote + "train --model linear --batch-size 2 --threads 1 --steps 3 --json");
  EXPECT_EQ(remote_train.exit_code, 0) << remote_train.output;
  EXPECT_THAT(remote_train.output, HasSubstr("\"peakResetAtStart\": true"));
  EXPECT_THAT(remote_train.output, ::testing::ContainsRegex("\"processRestFromRun\": \"[1-9]"));
  ::kill(agent, SIGTERM);
  int status = 0;
  ::waitpid(agent, &status, 0);
}

}  // namespace
}  // namespace edgecost

namespace {

// Issue 40 #12: a name a user gave reaches CSV as text, never as a spreadsheet formula.
TEST_F(CliTest, CsvFieldsThatLookLikeFormulasStayText) {
  const std::string db = "EDGECOST_DB='" + (dir_ / "costs.db").string() + "' " + EDGECOST_BIN + " ";
  const std::string in_dir = "cd '" + dir_.string() + "' && " + db;
  ASSERT_EQ(Run(in_dir + "costs linear --platform a72 --out '=HYPERLINK(1).json'").exit_code, 0);
  const CommandResult solved =
      Run(in_dir + "solve --graph '=HYPERLINK(1).json' --activation-budget 10kB --runtime-budget 2x");
  ASSERT_EQ(solved.exit_code, 0) << solved.output;
  const CommandResult csv = Edgecost("schedules --csv");
  ASSERT_EQ(csv.exit_code, 0) << csv.output;
  EXPECT_THAT(csv.output, HasSubstr(",'=HYPERLINK(1).json,"));
  EXPECT_THAT(csv.output, Not(HasSubstr(",=HYPERLINK")));
}

}  // namespace

namespace {

// Issue 40 #7: one NaN in the training inputs stops the run naming the record, and no weights are written.
TEST_F(CliTest, ANanInTheInputsStopsTheRunAndWritesNoWeights) {
  const std::string npz = (dir_ / "nan.npz").string();
  const CommandResult made = Run(
      "/usr/bin/python3 -c \"import numpy as np; d = np.load('examples/digits/finetune.npz'); x = d['x'].copy(); "
      "x[7, 0, 3, 3] = np.nan; np.savez('" + npz + "', x=x, y=d['y'])\"");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const std::string out = (dir_ / "tuned.onnx").string();
  const CommandResult trained = Edgecost("train --model examples/digits/digits_cnn.onnx --batch-size 997 --threads 1 "
                                         "--steps 1 --data " + npz + " --out " + out);
  EXPECT_EQ(trained.exit_code, 1) << trained.output;
  EXPECT_THAT(trained.output, HasSubstr("holds NaN"));
  EXPECT_THAT(trained.output, HasSubstr("record 7"));
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace

namespace {

// Issue 40 #10: where the trained model goes is checked before the first step, not after the last.
TEST_F(CliTest, OutputsThatCannotBeWrittenAreRefusedBeforeAnyStep) {
  const std::string model = "train --model examples/digits/digits_cnn.onnx --batch-size 4 --threads 1 --steps 2 ";
  const CommandResult missing = Edgecost(model + "--out " + (dir_ / "no/such/dir/m.onnx").string());
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
  EXPECT_THAT(missing.output, HasSubstr("there is no folder"));
  EXPECT_THAT(missing.output, Not(HasSubstr("step 1/")));
  const std::string out = (dir_ / "m.onnx").string();
  const CommandResult same = Edgecost(model + "--out " + out + " --out-npz " + out);
  EXPECT_EQ(same.exit_code, 1) << same.output;
  EXPECT_THAT(same.output, HasSubstr("name one file"));
  EXPECT_FALSE(std::filesystem::exists(out));
}

}  // namespace

namespace {

// Issue 40 #14: an export listing one op twice with contradicting figures imports nothing; listed
// twice alike, it counts once.
TEST_F(CliTest, AnImportListingAnOpTwiceWithOtherFiguresIsRefused) {
  ASSERT_EQ(Edgecost("profile --model linear --threads 1 --isolated-only --min-window-s 0.002 --accept-noisy").exit_code,
            0);
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  const std::string exported = (dir_ / "export.json").string();
  ASSERT_EQ(Edgecost(std::string("db export ") + host + " --out " + exported).exit_code, 0);
  const auto twice = [&](const std::string& name, const char* change) {
    const std::string path = (dir_ / name).string();
    const CommandResult made =
        Run("/usr/bin/python3 -c \"import json, copy; d = json.load(open('" + exported + "')); "
            "op = copy.deepcopy(d['opCosts'][0]); " + change + "; d['opCosts'].append(op); json.dump(d, open('" + path +
            "', 'w'))\"");
    EXPECT_EQ(made.exit_code, 0) << made.output;
    return path;
  };
  const std::string other = (dir_ / "other.db").string();
  const CommandResult refused =
      Edgecost("--db " + other + " db import --replace " + twice("contradicting.json", "op['energyJ'] *= 2"));
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_THAT(refused.output, HasSubstr("twice with different figures"));
  const CommandResult alike = Edgecost("--db " + other + " db import --replace " + twice("alike.json", "pass"));
  EXPECT_EQ(alike.exit_code, 0) << alike.output;
}

}  // namespace

namespace {

// Issue 40 #8 and #9: a checkpoint resumes only the run that wrote it, on the same records as read
// (a same-size file holding other records, other --mean/--std), and only whole: cut short at a
// field's end or with a byte of a weight flipped, it is refused, saying so.
TEST_F(CliTest, ACheckpointResumesOnlyItsOwnDataAndOnlyWhole) {
  const std::string data = (dir_ / "a.npz").string(), other = (dir_ / "b.npz").string();
  const CommandResult made = Run(
      "/usr/bin/python3 -c \"import numpy as np; d = np.load('examples/digits/finetune.npz'); "
      "np.savez('" + data + "', x=d['x'], y=d['y']); x = d['x'].copy(); x[3] = x[4]; "
      "np.savez('" + other + "', x=x, y=d['y'])\"");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  ASSERT_EQ(std::filesystem::file_size(data), std::filesystem::file_size(other));
  const std::string checkpoint = (dir_ / "run.ckpt").string();
  const std::string args = "train --model examples/digits/digits_cnn.onnx --batch-size 32 --threads 1 --no-store "
                           "--checkpoint " + checkpoint + " --steps ";
  ASSERT_EQ(Edgecost(args + "2 --data " + data).exit_code, 0);
  for (const std::string& changed : {"4 --data " + other, "4 --data " + data + " --mean 0.5 --std 2"}) {
    const CommandResult refused = Edgecost(args + changed + " --resume");
    EXPECT_EQ(refused.exit_code, 1) << changed << ": " << refused.output;
    EXPECT_THAT(refused.output, HasSubstr("other settings")) << changed;
    EXPECT_THAT(refused.output, HasSubstr("its records as read")) << changed;
  }
  std::string bytes;
  {
    std::ifstream in(checkpoint, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  edgecost::v1::TrainCheckpoint whole;
  ASSERT_TRUE(whole.ParseFromString(bytes));
  whole.clear_checksum();
  const std::string without_checksum = whole.SerializeAsString();  // cut at the end of a field
  std::string flipped = bytes;
  flipped[bytes.size() / 2] ^= 0x01;  // inside a weight
  for (const auto& [name, damaged] : {std::pair{"cut", without_checksum}, {"flipped", flipped}}) {
    std::ofstream(checkpoint, std::ios::binary | std::ios::trunc) << damaged;
    const CommandResult refused = Edgecost(args + "4 --data " + data + " --resume");
    EXPECT_EQ(refused.exit_code, 1) << name << ": " << refused.output;
    EXPECT_THAT(refused.output, HasSubstr("is damaged")) << name;
  }
}

}  // namespace

namespace {

// Issue 40 #6: a long run's listing is its summary, and its plot a bounded sample of its steps.
TEST_F(CliTest, ALongRunIsListedAsASummaryAndPlottedFromASample) {
  const std::string svg = (dir_ / "run.svg").string();
  const CommandResult trained =
      Edgecost("train --model linear --batch-size 2 --threads 1 --steps 3000 --svg " + svg);
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  std::ifstream in(svg);
  const std::string picture((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t dots = 0;
  for (size_t at = picture.find("<circle"); at != std::string::npos; at = picture.find("<circle", at + 1)) ++dots;
  EXPECT_LE(dots, 2 * 500u);  // two panels
  EXPECT_THAT(picture, HasSubstr("step 3000"));
  const CommandResult listed = EdgecostStdout("runs --json");
  ASSERT_EQ(listed.exit_code, 0) << listed.output;
  EXPECT_THAT(listed.output, HasSubstr("\"stepStats\": []"));
  EXPECT_LT(listed.output.size(), 64u << 10) << "a listing carries every step";
}

}  // namespace

namespace {

// Issue 40 #4: a central store's password stays out of what push, pull and serve --check-config print.
TEST_F(CliTest, ACentralStoresPasswordIsNeverPrinted) {
  ASSERT_EQ(Edgecost("profile --model linear --threads 1 --isolated-only --min-window-s 0.002 --accept-noisy").exit_code,
            0);  // something to push
  const std::string url = "postgresql://fleet:s3cret@/edgecost?host=" + (dir_ / "no-server").string();
  for (const std::string& args : {"db push '" + url + "'", "db pull '" + url + "' --device somewhere"}) {
    const CommandResult run = Edgecost(args);
    EXPECT_EQ(run.exit_code, 1) << args << ": " << run.output;
    EXPECT_THAT(run.output, Not(HasSubstr("s3cret"))) << args;
    EXPECT_THAT(run.output, HasSubstr("fleet:***@")) << args;
  }
  const std::string config = (dir_ / "agent.toml").string();
  std::ofstream(config) << "[store]\ncentral = \"" << url << "\"\n";
  const CommandResult checked = Edgecost("serve --config " + config + " --check-config --socket none");
  EXPECT_THAT(checked.output, Not(HasSubstr("s3cret")));
}

}  // namespace

namespace {

// Issue 40 #11: a second host of the same name cannot push its hardware over the first's in a
// central store (the guard `db import` has).
TEST_F(CliTest, AnotherHostOfTheSameNameCannotPushOverTheFirst) {
  ASSERT_EQ(Edgecost("profile --model linear --threads 1 --isolated-only --min-window-s 0.002 --accept-noisy").exit_code,
            0);
  const std::string central = (dir_ / "central.db").string();
  const CommandResult first = Edgecost("db push --create " + central);
  ASSERT_EQ(first.exit_code, 0) << first.output;
  char host[256] = {};
  ASSERT_EQ(::gethostname(host, sizeof host - 1), 0);
  const std::string exported = (dir_ / "export.json").string(), twin = (dir_ / "twin.json").string();
  ASSERT_EQ(Edgecost(std::string("db export ") + host + " --out " + exported).exit_code, 0);
  // The same name on other hardware: every mention of the fingerprint replaced.
  const CommandResult made = Run("/usr/bin/python3 -c \"import json; t = open('" + exported + "').read(); "
                                 "h = json.loads(t)['device']['fingerprint']['hash']; "
                                 "open('" + twin + "', 'w').write(t.replace(h, '0123456789abcdef'))\"");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const std::string other = (dir_ / "other.db").string();
  ASSERT_EQ(Edgecost("--db " + other + " db import --replace " + twin).exit_code, 0);
  const CommandResult second = Edgecost("--db " + other + " db push " + central);
  EXPECT_EQ(second.exit_code, 1) << second.output;
  EXPECT_THAT(second.output, HasSubstr("another host of the same name"));
  const CommandResult devices = Edgecost("--db " + central + " db info");
  EXPECT_THAT(devices.output, Not(HasSubstr("0123456789abcdef")));
}

}  // namespace

namespace {

// Issue 40 #3: an image swapped for a link after the run opened its folder is not read through it.
TEST_F(CliTest, AnImageSwappedForALinkMidRunIsNotRead) {
  const std::string folder = (dir_ / "images").string(), outside = (dir_ / "outside.png").string();
  const CommandResult made = Run(
      "/usr/bin/python3 -c \"import os; from PIL import Image; "
      "[os.makedirs('" + folder + "/' + c, exist_ok=True) for c in 'ab']; "
      "[Image.new('L', (8, 8), 40 * i).save('" + folder + "/%s/%d.png' % ('ab'[i % 2], i)) for i in range(8)]; "
      "Image.new('L', (8, 8), 255).save('" + outside + "')\"");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const std::string log = (dir_ / "train.log").string();
  const CommandResult started = Run("EDGECOST_DB='" + (dir_ / "costs.db").string() + "' " + EDGECOST_BIN +
                                    " train --model examples/digits/digits_cnn.onnx --batch-size 4 --threads 1 "
                                    "--steps 20000 --no-store --data " + folder + " >/dev/null 2>" + log + " & echo $!");
  const pid_t pid = std::stoi(started.output);
  for (int i = 0; i < 6000; ++i) {  // until the steps run
    std::ifstream in(log);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (text.find("step 1/") != std::string::npos) break;
    ::usleep(10'000);
  }
  const std::filesystem::path swapped = std::filesystem::path(folder) / "a" / "0.png";
  std::filesystem::remove(swapped);
  std::filesystem::create_symlink(outside, swapped);
  while (::kill(pid, 0) == 0) ::usleep(10'000);  // the shell's child: its end, not its status
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr("not the file it was"));
  EXPECT_THAT(text, Not(HasSubstr("step 20000/")));
}

}  // namespace

namespace {

// Issue 40 #5: a small file of many large constant folds is refused by a bound on their sum.
TEST_F(CliTest, ManyLargeConstantFoldsAreRefusedByTheirSum) {
  const std::string model = (dir_ / "folds.onnx").string();
  const CommandResult made = Run(
      "/usr/bin/python3 -c \"import onnx; from onnx import helper as h, TensorProto as T; "
      "n = [h.make_node('ConstantOfShape', ['shape'], ['c0'], value=h.make_tensor('v', T.FLOAT, [1], [1.0]))]; "
      "n += [h.make_node('Add', ['c%d' % i, 'c0'], ['c%d' % (i + 1)]) for i in range(200)]; "
      "n += [h.make_node('ReduceMean', ['c200'], ['s'], keepdims=0), h.make_node('Add', ['x', 's'], ['y'])]; "
      "g = h.make_graph(n, 'folds', [h.make_tensor_value_info('x', T.FLOAT, [1, 4])], "
      "[h.make_tensor_value_info('y', T.FLOAT, [1, 4])], "
      "[h.make_tensor('shape', T.INT64, [1], [1 << 20])]); "
      "onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 13)]), '" + model + "')\"");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  ASSERT_LT(std::filesystem::file_size(model), 16u << 10);
  const CommandResult added = Edgecost("models add " + model + " --name folds");
  EXPECT_EQ(added.exit_code, 1) << added.output;
  EXPECT_THAT(added.output, HasSubstr("constant folding computes more than"));
}

}  // namespace

namespace {

// Issue 40: a pooling window of 0 (which pooled to a NaN loss) is refused at import, naming the node.
TEST_F(CliTest, APoolingWindowOfZeroIsRefusedAtImport) {
  const std::string model = (dir_ / "pool0.onnx").string();
  const CommandResult made = Run(
      "/usr/bin/python3 -c \"import onnx; from onnx import helper as h, TensorProto as T; "
      "n = [h.make_node('MaxPool', ['x'], ['y'], kernel_shape=[0, 0])]; "
      "g = h.make_graph(n, 'pool0', [h.make_tensor_value_info('x', T.FLOAT, [1, 1, 4, 4])], "
      "[h.make_tensor_value_info('y', T.FLOAT, [1, 1, 5, 5])]); "
      "onnx.save(h.make_model(g, opset_imports=[h.make_opsetid('', 13)]), '" + model + "')\"");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const CommandResult added = Edgecost("models add " + model + " --name pool0");
  EXPECT_EQ(added.exit_code, 1) << added.output;
  EXPECT_THAT(added.output, HasSubstr("at least 1"));
}

}  // namespace

namespace {

// Issue 40: a solve stores the table it solved on once; its note does not grow with every solve.
TEST_F(CliTest, ATablesNoteDoesNotRepeatWithEverySolve) {
  ASSERT_EQ(Edgecost("profile --model linear --threads 1 --min-window-s 0.002").exit_code, 0);
  std::string output;
  for (int i = 0; i < 3; ++i) {
    const CommandResult solved = Edgecost("solve --model linear --device this --threads 1 --activation-budget 1MB");
    ASSERT_EQ(solved.exit_code, 0) << solved.output;
    output = solved.output;
  }
  size_t said = 0;
  for (size_t at = output.find("cost source auto"); at != std::string::npos; at = output.find("cost source auto", at + 1)) {
    ++said;
  }
  EXPECT_LE(said, 1u) << output;
}

}  // namespace

namespace {

// Issue 40 #1: an .npz whose directory names one deflated member many times (a zip bomb) is refused
// before anything is inflated.
TEST_F(CliTest, AnNpzWhoseEntriesShareOneMemberIsRefused) {
  const std::string bomb = (dir_ / "bomb.npz").string();
  const CommandResult made = Run(
      "/usr/bin/python3 -c \"import io, struct, zipfile; b = io.BytesIO(); "
      "z = zipfile.ZipFile(b, 'w', zipfile.ZIP_DEFLATED); z.writestr('x.npy', bytes(1 << 20)); z.close(); "
      "d = b.getvalue(); e = d.rindex(b'PK\\\\x05\\\\x06'); at = struct.unpack('<I', d[e + 16:e + 20])[0]; "
      "entry = d[at:e]; n = 200; "
      "entries = b''.join(entry.replace(b'x.npy', ('%05d' % i).encode()[:5]) for i in range(n)); "
      "end = d[e:e + 8] + struct.pack('<HHII', n, n, len(entries), at) + d[e + 20:]; "
      "open('" + bomb + "', 'wb').write(d[:at] + entries + end)\"");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  const CommandResult trained = Edgecost("train --model examples/digits/digits_cnn.onnx --batch-size 4 --threads 1 "
                                         "--steps 1 --no-store --data " + bomb + " --data-keys 00001,00002");
  EXPECT_EQ(trained.exit_code, 1) << trained.output;
  EXPECT_THAT(trained.output, HasSubstr("is not a readable zip archive: Zip archive inconsistent"));
}

}  // namespace
