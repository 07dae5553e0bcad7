#include <pthread.h>
#include <unistd.h>
#include <signal.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <thread>

#include <spdlog/spdlog.h>

#include "base/subprocess.h"
#include "cli/cli.h"
#include "costdb/costdb.h"
#include "costdb/postgres.h"
#include "daemon/daemon.h"
#include "daemon/fatal_signal.h"
#include "daemon/log.h"

namespace edgecost::cli {
namespace {

struct ServeFlags {
  std::string config_path;
  std::string socket;
  std::string tcp;  // HOST:PORT or PORT
  std::string token_file;
  std::string probes_config;
  std::string log_level = "info";
  int concurrent_solves = 0;  // 0: the config's, else the default
  bool restrict_mutations = false;
  bool check_config = false;
  std::string store;  // --store: a postgresql:// URL (or a file), as --db
};

Result<daemon::DaemonConfig> BuildConfig(const ServeFlags& flags, const Context& ctx) {
  daemon::DaemonConfig config;
  config.socket_path = daemon::DefaultSocketPath();
  if (!flags.config_path.empty()) EC_RETURN_IF_ERROR(daemon::LoadConfigFile(flags.config_path, config));
  // Flags win over the file.
  if (!ctx.db_path.empty()) config.db_path = ctx.db_path;
  if (!flags.store.empty()) {
    if (!ctx.db_path.empty() && ctx.db_path != flags.store) {
      return InvalidArgument("--store and --db name different stores: give one");
    }
    config.db_path = flags.store;
  }
  if (!flags.socket.empty()) config.socket_path = flags.socket == "none" ? "" : flags.socket;
  if (!flags.tcp.empty()) EC_RETURN_IF_ERROR(daemon::ParseTcpAddress(flags.tcp, config));
  if (!flags.token_file.empty()) config.token_file = flags.token_file;
  if (!flags.probes_config.empty()) config.probes_config = flags.probes_config;
  config.edgecost_binary = SelfExecutable();
  if (flags.concurrent_solves > 0) config.concurrent_solves = flags.concurrent_solves;
  if (flags.restrict_mutations) config.restrict_mutations = true;
  EC_RETURN_IF_ERROR(daemon::ValidateConfig(config));
  return config;
}

// A file's folder this user cannot make (the agent makes missing folders when it can): said, with what makes
// it (the systemd unit) and the flag that picks another.
std::string UnmakeableFolder(const std::string& file, const char* unit_setting, const char* flag) {
  std::filesystem::path folder = std::filesystem::path(file).parent_path();
  std::error_code ec;
  if (folder.empty() || std::filesystem::is_directory(folder, ec)) return "";
  std::filesystem::path existing = folder;
  while (existing.has_parent_path() && existing != existing.parent_path() && !std::filesystem::exists(existing, ec)) {
    existing = existing.parent_path();
  }
  if (::access(existing.c_str(), W_OK | X_OK) == 0) return "";
  return "; its folder " + folder.string() + " does not exist and this user cannot make it (the systemd unit's " +
         unit_setting + " does; elsewhere give " + flag + ")";
}

// --check-config: which database the agent will use and why, and folders it would miss.
void PrintWhereItServes(const daemon::DaemonConfig& config, const ServeFlags& flags, const Context& ctx) {
  const std::string db = config.db_path.empty() ? costdb::DefaultDbPath() : config.db_path;
  const char* env_db = std::getenv("EDGECOST_DB");
  const std::string why = !flags.store.empty()       ? "from --store"
                          : !ctx.db_path.empty()     ? "from --db"
                          : !config.db_path.empty()  ? "from [database] path in " + flags.config_path
                          : env_db && *env_db        ? "from $EDGECOST_DB"
                          : std::getenv("XDG_DATA_HOME") ? "from $XDG_DATA_HOME"
                                                         : "the default";
  std::error_code ec;
  if (costdb::IsPostgresUrl(db)) {
    std::cout << "database       " << costdb::RedactUrl(db) << " (PostgreSQL, " << why
              << "; its schema is made or migrated at start)\n";
  } else {
    const bool exists = std::filesystem::exists(db, ec);
    const std::string unmakeable = UnmakeableFolder(db, "StateDirectory=", "--db FILE");
    std::cout << "database       " << db << " (" << why
              << (exists ? ", exists" : unmakeable.empty() ? ", made at start" : unmakeable) << ")\n";
  }
  if (!config.socket_path.empty()) {
    const std::string missing = UnmakeableFolder(config.socket_path, "RuntimeDirectory=", "--socket PATH");
    if (!missing.empty()) std::cout << "socket         " << config.socket_path << ":" << missing.substr(1) << "\n";
  }
  std::cout << "train data     ";
  if (config.train_data_dirs.empty()) std::cout << "none over RPC (set [train] data_dirs to allow directories)";
  for (size_t i = 0; i < config.train_data_dirs.size(); ++i) std::cout << (i ? ", " : "") << config.train_data_dirs[i];
  std::cout << "\n";
  std::cout << "central store  ";
  if (config.central_store.empty()) {
    std::cout << "none (set [store] central to push what this agent measures to a fleet's store)\n";
  } else {
    std::cout << costdb::RedactUrl(config.central_store) << " (pushed every " << config.push_interval_s << " s; retried up to every "
              << config.retry_max_s << " s while unreachable)\n";
  }
}

int RunServe(const ServeFlags& flags, const Context& ctx) {
  auto config = BuildConfig(flags, ctx);
  if (!config.ok()) return UsageError(config.status());
  if (flags.check_config) {
    std::cout << "config ok: socket " << (config->socket_path.empty() ? "none" : config->socket_path) << ", TCP "
              << (config->tcp_port >= 0 ? config->tcp_host + ":" + std::to_string(config->tcp_port) : "off") << "\n";
    PrintWhereItServes(*config, flags, ctx);
    return kExitOk;
  }
  // Signals go to one thread that turns them into a clean stop.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  if (Status s = daemon::SetUpLogging(flags.log_level); !s.ok()) return UsageError(s);
  daemon::InstallSigbusHandler();  // a truncated <db>-shm: exit saying so, not "Bus error"
  auto owned = std::make_unique<daemon::Daemon>(*config);
  daemon::Daemon& agent = *owned;
  auto port = agent.Start();
  if (!port.ok()) return Failure(port.status());
  spdlog::info("event=serving socket={} tcp={} db={} concurrent_solves={}",
               config->socket_path.empty() ? "none" : "unix:" + config->socket_path,
               config->tcp_port >= 0 ? "http://" + config->tcp_host + ":" + std::to_string(*port) : "off",
               daemon::Quoted(costdb::RedactUrl(config->db_path.empty() ? costdb::DefaultDbPath() : config->db_path)),
               config->concurrent_solves);
  std::thread waiter([&agent, signals] {
    for (;;) {
      int signal = 0;
      sigwait(&signals, &signal);
      if (signal == SIGHUP) {  // look at the socket file and the hardware now
        agent.CheckSocket("SIGHUP");
        if (Status s = agent.CheckHardware("SIGHUP"); !s.ok()) {
          spdlog::error("event=fingerprint_check_failed why=SIGHUP message={}", daemon::Quoted(s.message()));
        }
        continue;
      }
      spdlog::info("event=stopping signal={}", sigabbrev_np(signal));
      agent.Stop();
      return;
    }
  });
  agent.Run();
  waiter.join();
  owned.reset();  // the running job stops at a safe point and is stored
  spdlog::info("event=stopped");
  return kExitOk;
}

}  // namespace

void RegisterServeCommand(CLI::App& app, Context& ctx) {
  auto flags = std::make_shared<ServeFlags>();
  CLI::App* cmd = app.add_subcommand("serve", "Run the agent: serve costs, schedules and jobs over Twirp (HTTP/1.1)");
  cmd->add_option("--config", flags->config_path, "TOML config file ([server], [limits], [database], [probes])");
  cmd->add_option("--store", flags->store,
                  "The cost store: a postgresql://USER@HOST/DB URL shared by many agents (or a file, as --db)");
  cmd->add_option("--socket", flags->socket, "Unix socket (default $XDG_RUNTIME_DIR/edgecost.sock; none to disable)");
  cmd->add_option("--tcp", flags->tcp, "Also listen on TCP, HOST:PORT (loopback unless a host is given)");
  cmd->add_option("--token-file", flags->token_file, "Bearer token for TCP and restricted calls");
  cmd->add_flag("--restrict-mutations", flags->restrict_mutations, "Profile, solve and cancel need the token");
  cmd->add_option("--probes-config", flags->probes_config,
                  "TOML file whose [probes] section names meters and rails for /metrics and profiles");
  cmd->add_option("--concurrent-solves", flags->concurrent_solves,
                  "Solve calls running at once (default: half the cores)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--log-level", flags->log_level, "trace, debug (one line per request), info, warn or error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "off"}))
      ->capture_default_str();
  cmd->add_flag("--check-config", flags->check_config, "Validate the configuration and exit");
  cmd->footer(
      "Examples:\n"
      "  edgecost serve --socket /tmp/edgecost.sock\n"
      "  curl --unix-socket /tmp/edgecost.sock -H 'Content-Type: application/json' \\\n"
      "       -d '{\"model\":\"resnet18_cifar\",\"device\":\"a72\"}' \\\n"
      "       http://localhost/twirp/edgecost.v1.CostService/GetCostTable\n"
      "  edgecost serve --tcp 127.0.0.1:8080 --token-file /etc/edgecost/token");
  cmd->callback([flags, &ctx] { ctx.exit_code = LocalOnly(ctx, [&] { return RunServe(*flags, ctx); }); });
}

}  // namespace edgecost::cli
