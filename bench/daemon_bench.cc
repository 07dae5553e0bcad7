#include "bench/daemon_bench.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <onnx/onnx_pb.h>

#include "costdb/costdb.h"
#include "daemon/daemon.h"
#include "graph/resolve.h"
#include "profiler/profile.h"
#include "service/models.h"

namespace edgecost::daemon {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Level {
  uint64_t requests = 0;
  uint64_t errors = 0;
  std::vector<double> latencies_s;
};

// One client connection sending GetCostTable for `model` on `device` until `stop`.
void Client(int port, const std::string& token, bool protobuf, const std::string& model, const std::string& device,
            const std::atomic<bool>& stop, Level& level) {
  try {
    asio::io_context io;
    beast::tcp_stream stream(io);
    stream.connect(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)));
    http::request<http::string_body> request(http::verb::post, "/twirp/edgecost.v1.CostService/GetCostTable", 11);
    request.set(http::field::host, "localhost");
    request.set(http::field::content_type, protobuf ? "application/protobuf" : "application/json");
    request.set(http::field::authorization, "Bearer " + token);
    request.keep_alive(true);
    v1::GetCostTableRequest body;
    body.set_model(model);
    body.set_device(device);
    request.body() =
        protobuf ? body.SerializeAsString() : R"({"model":")" + model + R"(","device":")" + device + R"("})";
    request.prepare_payload();
    beast::flat_buffer buffer;
    while (!stop) {
      const auto start = Clock::now();
      http::write(stream, request);
      http::response<http::string_body> response;
      http::read(stream, buffer, response);
      level.latencies_s.push_back(std::chrono::duration<double>(Clock::now() - start).count());
      ++level.requests;
      if (response.result() != http::status::ok) ++level.errors;
    }
  } catch (const std::exception&) {
    ++level.errors;
  }
}

double Percentile(std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  return sorted[std::min(sorted.size() - 1, static_cast<size_t>(q * static_cast<double>(sorted.size())))];
}

// `connections` clients asking for one table for `seconds`: every request and latency.
Level RunLevel(int port, const std::string& token, bool protobuf, const std::string& model, const std::string& device,
               int connections, double seconds, double* elapsed_s) {
  std::atomic<bool> stop{false};
  std::vector<Level> levels(static_cast<size_t>(connections));
  std::vector<std::thread> clients;
  const auto start = Clock::now();
  for (int c = 0; c < connections; ++c) {
    clients.emplace_back(
        [&, c] { Client(port, token, protobuf, model, device, stop, levels[static_cast<size_t>(c)]); });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (std::thread& t : clients) t.join();
  *elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
  Level total;
  for (Level& l : levels) {
    total.requests += l.requests;
    total.errors += l.errors;
    total.latencies_s.insert(total.latencies_s.end(), l.latencies_s.begin(), l.latencies_s.end());
  }
  std::sort(total.latencies_s.begin(), total.latencies_s.end());
  return total;
}

void PrintLevel(std::ostream& out, const std::string& label, Level& total, double elapsed_s) {
  char line[256];
  std::snprintf(line, sizeof line, "%12s %14.0f %10.3f %10.3f %10.3f %8llu\n", label.c_str(),
                static_cast<double>(total.requests) / elapsed_s, 1e3 * Percentile(total.latencies_s, 0.50),
                1e3 * Percentile(total.latencies_s, 0.99),
                1e3 * (total.latencies_s.empty() ? 0 : total.latencies_s.back()),
                static_cast<unsigned long long>(total.errors));
  out << line << std::flush;
}

// A measured table as a profile stores one, without running a profile: the
// preset's costs of `model` under this device's fingerprint, one op cost per node.
Status StoreMeasuredTable(const std::string& db_path, const std::string& model) {
  EC_ASSIGN_OR_RETURN(costdb::CostDb db, costdb::CostDb::Open(db_path));
  EC_ASSIGN_OR_RETURN(v1::Device device, db.GetDevice(profiler::ThisDeviceName()));
  graph::GraphSpec spec;
  spec.model_or_file = model;
  EC_ASSIGN_OR_RETURN(v1::CostTable table, graph::LoadCostTable(spec, "a72", "poet-flops"));
  table.set_device(device.name());
  table.set_fingerprint_hash(device.fingerprint().hash());
  table.set_cost_source(profiler::kMeasuredSource);
  for (v1::NodeCost& cost : *table.mutable_costs()) {
    v1::OpCost op;
    op.mutable_signature()->set_key("bench-op-" + std::to_string(cost.node()));
    op.mutable_runtime()->set_median_s(cost.runtime_s());
    op.mutable_runtime()->set_repetitions(10);
    op.set_energy_j(cost.compute_j());
    op.set_output_bytes(cost.ram_bytes());
    cost.set_op_key(op.signature().key());
    EC_RETURN_IF_ERROR(db.PutOpCost(device.fingerprint().hash(), 0, op));
  }
  return db.PutCostTable(table).status();
}


// One request at a time, `calls` times: the median latency in seconds, or the error.
Result<double> MedianLatency(int port, const std::string& token, http::verb verb, const std::string& target,
                             int calls) {
  std::vector<double> latencies_s;
  try {
    asio::io_context io;
    beast::tcp_stream stream(io);
    stream.connect(asio::ip::tcp::endpoint(asio::ip::make_address("127.0.0.1"), static_cast<unsigned short>(port)));
    for (int i = 0; i < calls; ++i) {
      http::request<http::string_body> request(verb, target, 11);
      request.set(http::field::host, "localhost");
      request.set(http::field::authorization, "Bearer " + token);
      if (verb == http::verb::post) {
        request.set(http::field::content_type, "application/json");
        request.body() = "{}";
      }
      request.keep_alive(true);
      request.prepare_payload();
      const auto start = Clock::now();
      http::write(stream, request);
      beast::flat_buffer buffer;
      http::response_parser<http::string_body> parser;
      parser.body_limit(256u << 20);
      http::read(stream, buffer, parser);
      latencies_s.push_back(std::chrono::duration<double>(Clock::now() - start).count());
      if (parser.get().result() != http::status::ok) {
        return Internal(target + " answered " + std::to_string(parser.get().result_int()));
      }
    }
  } catch (const std::exception& e) {
    return Internal(target + ": " + e.what());
  }
  std::sort(latencies_s.begin(), latencies_s.end());
  return Percentile(latencies_s, 0.5);
}

}  // namespace

// An ONNX model of `nodes` Relu after one another: small bytes, many nodes.
std::string OnnxChain(int nodes) {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(13);
  onnx::GraphProto& graph = *model.mutable_graph();
  graph.set_name("chain");
  auto typed = [](onnx::ValueInfoProto& value, const std::string& name) {
    value.set_name(name);
    onnx::TypeProto_Tensor& tensor = *value.mutable_type()->mutable_tensor_type();
    tensor.set_elem_type(onnx::TensorProto::FLOAT);
    tensor.mutable_shape()->add_dim()->set_dim_value(1);
    tensor.mutable_shape()->add_dim()->set_dim_value(16);
  };
  typed(*graph.add_input(), "x");
  for (int i = 0; i < nodes; ++i) {
    onnx::NodeProto& node = *graph.add_node();
    node.set_op_type("Relu");
    node.add_input(i == 0 ? "x" : "t" + std::to_string(i - 1));
    node.add_output("t" + std::to_string(i));
  }
  typed(*graph.add_output(), "t" + std::to_string(nodes - 1));
  return model.SerializeAsString();
}

Status RunDaemonBenchmark(std::ostream& out, const DaemonBenchOptions& options) {
  const fs::path dir = fs::temp_directory_path() / ("edgecost_daemon_bench_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string token = "bench-token-0123456789abcdef";
  std::ofstream(dir / "token") << token << "\n";
  DaemonConfig config;
  config.db_path = (dir / "costs.db").string();
  config.tcp_port = 0;
  config.token_file = (dir / "token").string();
  config.fingerprint_check_s = 0;
  config.limits.worker_threads = options.worker_threads;
  Daemon daemon(config);
  EC_ASSIGN_OR_RETURN(int port, daemon.Start());
  std::thread server([&daemon] { daemon.Run(); });

  out << "Daemon benchmark: CostService/GetCostTable (linear on a72, " << (options.protobuf ? "protobuf" : "JSON")
      << ") over loopback TCP with a bearer token, " << options.seconds_per_level << " s per level, "
      << options.worker_threads << " worker threads\n"
      << "(target: >= 10,000 requests/s and p99 < 5 ms at 16 connections; client and server share this machine)\n\n";
  char line[256];
  std::snprintf(line, sizeof line, "%12s %14s %10s %10s %10s %8s\n", "connections", "requests/s", "p50 ms", "p99 ms",
                "max ms", "errors");
  out << line << std::flush;
  for (int connections : {1, 16, 256}) {
    double elapsed_s = 0;
    Level total =
        RunLevel(port, token, options.protobuf, "linear", "a72", connections, options.seconds_per_level, &elapsed_s);
    PrintLevel(out, std::to_string(connections), total, elapsed_s);
  }

  // A preset table is an analytic one; a measured one is read from the database.
  const std::string model = "resnet18_cifar";
  EC_RETURN_IF_ERROR(StoreMeasuredTable(config.db_path, model));
  out << "\nGetCostTable of " << model << " at 64 connections: a preset table (a72, poet-flops) and a measured one "
      << "(this device, stored op costs)\n"
      << "(target: the measured table within 2x of the preset's requests/s)\n\n";
  std::snprintf(line, sizeof line, "%12s %14s %10s %10s %10s %8s\n", "table", "requests/s", "p50 ms", "p99 ms",
                "max ms", "errors");
  out << line << std::flush;
  for (const auto& [label, device] : {std::pair<std::string, std::string>{"preset", "a72"}, {"measured", "this"}}) {
    double elapsed_s = 0;
    Level total = RunLevel(port, token, options.protobuf, model, device, 64, options.seconds_per_level, &elapsed_s);
    PrintLevel(out, label, total, elapsed_s);
  }

  // Listing with a large stored model: the summary stored when it was added, or an import per call.
  {
    EC_ASSIGN_OR_RETURN(costdb::CostDb db, costdb::CostDb::Open(config.db_path));
    const std::string chain = OnnxChain(options.chain_nodes);
    const auto start = Clock::now();
    EC_RETURN_IF_ERROR(service::AddModel(db, "chain", chain, /*replace=*/false).status());
    const double add_s = std::chrono::duration<double>(Clock::now() - start).count();
    out << "\nA stored ONNX chain of " << options.chain_nodes << " Relu nodes (" << chain.size() << " B), added in "
        << add_s << " s\n";
  }
  for (const auto& [what, verb, target] :
       {std::tuple<std::string, http::verb, std::string>{"ListModels", http::verb::post,
                                                         "/twirp/edgecost.v1.CostService/ListModels"},
        {"GET /", http::verb::get, "/"}}) {
    Result<double> median_s = MedianLatency(port, token, verb, target, 3);
    if (!median_s.ok()) {
      out << what << ": " << median_s.status().message() << "\n";
    } else {
      out << what << ": median " << 1e3 * *median_s << " ms over 3 calls\n";
    }
  }
  daemon.Stop();
  server.join();
  std::error_code ec;
  fs::remove_all(dir, ec);
  return Status::Ok();
}

}  // namespace edgecost::daemon
