// Shared helpers for the costdb tests: a private temporary folder per test,
// file snapshots to prove a refused file was not touched, synthetic protos,
// and a way to run checks in a child process.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "costdb/costdb.h"
#include "proto/edgecost.pb.h"
#include "tests/temp_dir.h"

namespace edgecost::costdb::test_support {

class TempDirTest : public edgecost::testing::TempDirTest {
 protected:
  void SetUp() override {
    edgecost::testing::TempDirTest::SetUp();
    path_ = (dir_ / "costs.db").string();
  }

  std::string path_;
};

// Contents and modification time. Read only while this process has no
// connection to the file open: closing a descriptor drops SQLite's POSIX locks.
struct FileSnapshot {
  std::string bytes;
  std::filesystem::file_time_type mtime;
  bool operator==(const FileSnapshot&) const = default;
};

inline FileSnapshot Snapshot(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream out;
  out << in.rdbuf();
  return {out.str(), std::filesystem::last_write_time(path)};
}

inline v1::TrainingGraph Graph(const std::string& model, int nodes) {
  v1::TrainingGraph graph;
  graph.set_model(model);
  graph.set_derivation("poet");
  graph.set_trainable("all");
  graph.set_batch_size(1);
  graph.set_param_bytes(4096);
  for (int i = 0; i < nodes; ++i) {
    v1::TrainingNode& node = *graph.add_nodes();
    node.set_index(static_cast<uint32_t>(i));
    node.set_name(model + "/n" + std::to_string(i));
    node.set_output_bytes(1024u * static_cast<uint64_t>(i + 1));
    if (i > 0) node.add_inputs(static_cast<uint32_t>(i - 1));
  }
  return graph;
}

// A preset table unless `hash` names a measured fingerprint. Every runtime_s is
// `generation` plus a per-node fraction, so a reader can tell tables apart.
inline v1::CostTable Table(const std::string& model, const std::string& device, int nodes, int generation = 0,
                           const std::string& hash = "") {
  v1::CostTable table;
  *table.mutable_graph() = Graph(model, nodes);
  table.set_device(device);
  table.set_fingerprint_hash(hash.empty() ? "preset:" + device : hash);
  table.set_cost_source(hash.empty() ? "poet-flops" : "measured");
  table.set_note("generation " + std::to_string(generation));
  for (int i = 0; i < nodes; ++i) {
    v1::NodeCost& cost = *table.add_costs();
    cost.set_node(static_cast<uint32_t>(i));
    cost.set_runtime_s(generation + i * 1e-6);
    cost.set_compute_j(0.5 + i);
    cost.set_ram_bytes(1024u * static_cast<uint64_t>(i + 1));
    cost.set_page_in_j(0.01 * i);
    cost.set_page_out_j(0.02 * i);
    cost.set_op_key(hash.empty() ? "" : "op" + std::to_string(i));
  }
  return table;
}

inline v1::Device PresetDevice(const std::string& name) {
  v1::Device device;
  device.set_name(name);
  device.set_kind(v1::Device::KIND_PRESET);
  device.mutable_fingerprint()->set_board_preset(name);
  device.mutable_fingerprint()->set_hash("preset:" + name);
  return device;
}

// Records the preset device of a preset table (the database holds no rule that
// would), then stores the table.
inline Result<int64_t> PutPresetTable(CostDb& db, const v1::CostTable& table) {
  EC_RETURN_IF_ERROR(db.UpsertDevice(PresetDevice(table.device())).status());
  return db.PutCostTable(table);
}
inline Result<int64_t> PutPresetTable(CostDb&& db, const v1::CostTable& table) { return PutPresetTable(db, table); }

inline v1::Device MeasuredDevice(const std::string& name, const std::string& hash) {
  v1::Device device;
  device.set_name(name);
  device.set_kind(v1::Device::KIND_MEASURED);
  v1::Fingerprint& fingerprint = *device.mutable_fingerprint();
  fingerprint.set_cpu_model("Cortex-A72");
  fingerprint.set_online_cores(4);
  fingerprint.set_cpu_governor("ondemand");
  fingerprint.set_memory_bytes(4ull << 30);
  fingerprint.set_hash(hash);
  return device;
}

// Runs `body` in a forked child; returns what it returned ("" = success) or
// why it did not finish. The child must open its own database connections.
inline std::string InChild(const std::function<std::string()>& body) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) return "pipe failed";
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(pipe_fds[0]);
    const std::string message = body();
    const ssize_t written = ::write(pipe_fds[1], message.data(), message.size());
    ::_exit(written == static_cast<ssize_t>(message.size()) ? 0 : 1);
  }
  ::close(pipe_fds[1]);
  std::string message;
  char buffer[256];
  for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof buffer)) > 0;) message.append(buffer, static_cast<size_t>(n));
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "child died: " + message;
  return message;
}

}  // namespace edgecost::costdb::test_support
