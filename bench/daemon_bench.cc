#include "bench/daemon_bench.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include <boost/asio.hpp>
#include <boost/beast.hpp>

#include "daemon/daemon.h"

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

// One client connection sending GetCostTable (JSON) until `stop`.
void Client(int port, const std::string& token, bool protobuf, const std::atomic<bool>& stop, Level& level) {
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
    body.set_model("linear");
    body.set_device("a72");
    request.body() = protobuf ? body.SerializeAsString() : R"({"model":"linear","device":"a72"})";
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

}  // namespace

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
    std::atomic<bool> stop{false};
    std::vector<Level> levels(static_cast<size_t>(connections));
    std::vector<std::thread> clients;
    const auto start = Clock::now();
    for (int c = 0; c < connections; ++c) {
      clients.emplace_back([&, c] { Client(port, token, options.protobuf, stop, levels[static_cast<size_t>(c)]); });
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(options.seconds_per_level));
    stop = true;
    for (std::thread& t : clients) t.join();
    const double elapsed_s = std::chrono::duration<double>(Clock::now() - start).count();
    Level total;
    for (Level& l : levels) {
      total.requests += l.requests;
      total.errors += l.errors;
      total.latencies_s.insert(total.latencies_s.end(), l.latencies_s.begin(), l.latencies_s.end());
    }
    std::sort(total.latencies_s.begin(), total.latencies_s.end());
    std::snprintf(line, sizeof line, "%12d %14.0f %10.3f %10.3f %10.3f %8llu\n", connections,
                  static_cast<double>(total.requests) / elapsed_s, 1e3 * Percentile(total.latencies_s, 0.50),
                  1e3 * Percentile(total.latencies_s, 0.99),
                  1e3 * (total.latencies_s.empty() ? 0 : total.latencies_s.back()),
                  static_cast<unsigned long long>(total.errors));
    out << line << std::flush;
  }
  daemon.Stop();
  server.join();
  std::error_code ec;
  fs::remove_all(dir, ec);
  return Status::Ok();
}

}  // namespace edgecost::daemon
