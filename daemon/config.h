// The daemon's configuration: defaults, the TOML file ([server], [limits],
// [database], [train], [store]; [probes] is read by probes::LoadProbesConfig), and the checks
// that fail a start early, each naming the key to fix.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "daemon/http_server.h"

namespace edgecost::daemon {

// Half the cores, at least one: solves are CPU-bound, and queries and profiles need the rest.
int DefaultConcurrentSolves();

struct DaemonConfig {
  std::string db_path;      // empty: the default cost database
  std::string socket_path;  // empty: no Unix socket
  unsigned socket_mode = 0660;
  std::string socket_group;            // empty: the daemon's own group
  std::string tcp_host = "127.0.0.1";  // loopback unless told otherwise
  int tcp_port = -1;                   // -1: no TCP; 0: any free port
  std::string token_file;              // required with TCP
  bool restrict_mutations = false;     // profile, solve, cancel only with the token, even on the socket
  std::string probes_config;           // the config file, for its [probes] section (meters, rails)
  // The edgecost executable that runs a profile's training steps in a process of their own (`serve`
  // sets its own); empty: in the daemon's process, whose memory is not a training process's (tests).
  std::string edgecost_binary;
  double fingerprint_check_s = 300;    // how often to look for hardware changes; 0: only at start and on SIGHUP
  bool reprofile_on_change = true;     // on a hardware change, profile again the models measured on the old hardware
  int concurrent_solves = DefaultConcurrentSolves();  // Solve calls running at once; up to 4x as many wait
  size_t finished_jobs_in_memory = 256;  // kDefaultFinishedJobsInMemory; older finished jobs are read from the db
  ServerLimits limits;
  // [train] data_dirs: the only directories a train job's data may come from (symlinks followed);
  // none: train jobs over RPC take no data set, only synthetic batches.
  std::vector<std::string> train_data_dirs;
  // [store] central: a central store (postgresql:// URL or SQLite path) this agent pushes what it
  // measures to, in the background; empty: none. The agent works on db_path whatever the store does.
  std::string central_store;
  double push_interval_s = 30;  // [store] push_interval_s: how often to look for something new to send
  double retry_max_s = 300;     // [store] retry_max_s: the longest wait between attempts while the store is unreachable
};

// $XDG_RUNTIME_DIR/edgecost.sock, else /run/edgecost/edgecost.sock.
std::string DefaultSocketPath();

// Reads a TOML config file over `config`. Unknown sections and keys, values of
// the wrong type and values out of range are errors naming the key.
Status LoadConfigFile(const std::string& path, DaemonConfig& config);

// "0660" or "660": an octal file mode; anything else is an error.
Result<unsigned> ParseSocketMode(const std::string& text);
// "PORT" or "HOST:PORT" for --tcp; the port is 0 (any free one) to 65535.
Status ParseTcpAddress(const std::string& text, DaemonConfig& config);

// Checks what would fail at start: nothing to listen on, TCP without a token,
// an unreadable or short token, a bad [probes] section, limits below one,
// a [train] data directory that is not one.
Status ValidateConfig(const DaemonConfig& config);

// The bearer token in `path`: its first line, without trailing white space.
Result<std::string> ReadToken(const std::string& path);

}  // namespace edgecost::daemon
