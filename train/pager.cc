#include "train/pager.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "base/clock.h"

namespace edgecost::train {
namespace {

Status Errno(const std::string& what, const std::string& path) {
  const int error = errno;
  const ErrorCode code = error == ENOSPC || error == EFBIG || error == EDQUOT ? ErrorCode::kResourceExhausted
                         : error == EACCES || error == EROFS                  ? ErrorCode::kPermissionDenied
                                                                              : ErrorCode::kUnavailable;
  return Status(code,
                what + " " + path + ": " + std::strerror(error) + "; free space there or choose another --paging-dir");
}

Status WriteFile(const std::string& path, const char* data, uint64_t bytes) {
  const int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("cannot create", path);
  uint64_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::write(fd, data + done, bytes - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Status status = Errno("cannot write", path);
      ::close(fd);
      return status;
    }
    done += static_cast<uint64_t>(n);
  }
  if (::fsync(fd) != 0) {
    Status status = Errno("cannot fsync", path);
    ::close(fd);
    return status;
  }
  ::close(fd);
  return Status::Ok();
}

Status ReadFile(const std::string& path, char* buffer, uint64_t bytes) {
  int fd = ::open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0) {  // tmpfs and some filesystems refuse O_DIRECT: drop the cached pages instead
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Errno("cannot open", path);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  }
  const uint64_t aligned = (bytes + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
  uint64_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::read(fd, buffer + done, aligned - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status status = Errno("cannot read", path);
      ::close(fd);
      return status;
    }
    if (n == 0) break;
    done += static_cast<uint64_t>(n);
  }
  ::close(fd);
  if (done < bytes) {
    return DataLoss(path + " holds " + std::to_string(done) + " B of the " + std::to_string(bytes) +
                    " B paged out; was it changed by another process?");
  }
  return Status::Ok();
}

}  // namespace

Pager::Pager(std::string dir, Arena& arena, double origin_s)
    : dir_(std::move(dir)), arena_(arena), origin_s_(origin_s) {}

Result<std::unique_ptr<Pager>> Pager::Start(const std::string& dir, Arena& arena, double origin_s) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return PermissionDenied("cannot create paging directory " + dir + ": " + ec.message());
  RemoveStaleFiles(dir);
  std::unique_ptr<Pager> pager(new Pager(dir, arena, origin_s));
  pager->thread_ = std::thread([p = pager.get()] { p->Loop(); });
  return pager;
}

Pager::~Pager() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::error_code ec;
  for (size_t node = 0; node < written_.size(); ++node) {
    if (written_[node]) std::filesystem::remove(PathFor(static_cast<int>(node)), ec);
  }
}

std::string Pager::PathFor(int node) const {
  return dir_ + "/edgecost-train-" + std::to_string(::getpid()) + "-" + std::to_string(node) + ".page";
}

int Pager::RemoveStaleFiles(const std::string& dir, bool own_too) {
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("edgecost-train-") || !name.ends_with(".page")) continue;
    const long pid = std::strtol(name.c_str() + 15, nullptr, 10);
    if (pid <= 0) continue;
    const bool own = pid == static_cast<long>(::getpid());
    if (!(own && own_too) && (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM)) continue;  // running
    std::error_code remove_ec;
    if (std::filesystem::remove(entry.path(), remove_ec)) ++removed;
  }
  return removed;
}

void Pager::SetStage(int stage, uint64_t reserve_bytes) {
  {
    std::lock_guard lock(mutex_);
    stage_ = stage;
    reserve_ = reserve_bytes;
    early_bytes_ = 0;  // the last stage's page-ins are resident in the plan from now on
  }
  changed_.notify_all();
}

void Pager::SetReserve(uint64_t reserve_bytes) {
  {
    std::lock_guard lock(mutex_);
    if (reserve_bytes == reserve_) return;
    reserve_ = reserve_bytes;
  }
  changed_.notify_all();
}

void Pager::Grow(int node) {
  const size_t size = static_cast<size_t>(node) + 1;
  if (pending_in_.size() >= size) return;
  pending_in_.resize(size, 0);
  pending_out_.resize(size, 0);
  urgent_.resize(size, 0);
  written_.resize(size, 0);
}

void Pager::PageOut(int node, int stage) {
  {
    std::lock_guard lock(mutex_);
    if (!error_.ok()) return;
    Grow(node);
    ++pending_out_[static_cast<size_t>(node)];
    queue_.push_back({true, node, stage, 0});
  }
  changed_.notify_all();
}

void Pager::PageIn(int node, int stage, uint64_t bytes) {
  {
    std::lock_guard lock(mutex_);
    if (!error_.ok()) return;
    Grow(node);
    ++pending_in_[static_cast<size_t>(node)];
    queue_.push_back({false, node, stage, bytes});
  }
  changed_.notify_all();
}

bool Pager::Runnable(const Request& r) const {
  if (r.page_out || r.stage < stage_ || urgent_[static_cast<size_t>(r.node)]) return true;
  // An early read: only into room the rest of the stage will not need.
  return reserve_ + early_bytes_ + r.bytes <= arena_.limit_bytes();
}

void Pager::Loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return stop_ || (!queue_.empty() && Runnable(queue_.front())); });
    if (stop_) return;
    Request request = queue_.front();
    queue_.pop_front();
    if (!request.page_out && request.stage >= stage_) early_bytes_ += request.bytes;
    lock.unlock();
    const double start = SteadyNowS();
    Status status = Run(request);
    const double end = SteadyNowS();
    lock.lock();
    const size_t node = static_cast<size_t>(request.node);
    if (request.page_out) {
      --pending_out_[node];
      stats_.page_out_s += end - start;
      stats_.paged_out_bytes += request.bytes;
      ++stats_.page_outs;
    } else {
      --pending_in_[node];
      urgent_[node] = 0;
      stats_.page_in_s += end - start;
      stats_.paged_in_bytes += request.bytes;
      ++stats_.page_ins;
    }
    events_.push_back({request.node, request.page_out, start - origin_s_, end - start});
    if (!status.ok() && error_.ok()) {
      error_ = status;
      // Nothing after a failed request can be trusted: drop the rest so no one waits for it.
      queue_.clear();
      std::fill(pending_in_.begin(), pending_in_.end(), 0);
      std::fill(pending_out_.begin(), pending_out_.end(), 0);
    }
    changed_.notify_all();
  }
}

Status Pager::Run(Request& request) {
  const std::string path = PathFor(request.node);
  if (request.page_out) {
    float* data = arena_.Get(request.node);
    if (!data) return Internal("node " + std::to_string(request.node) + " is paged out but has no buffer");
    request.bytes = arena_.Bytes(request.node);
    {
      std::lock_guard lock(mutex_);
      written_[static_cast<size_t>(request.node)] = 1;
    }
    return WriteFile(path, reinterpret_cast<const char*>(data), request.bytes);
  }
  EC_ASSIGN_OR_RETURN(float* buffer, arena_.Allocate(request.node, request.bytes));
  return ReadFile(path, reinterpret_cast<char*>(buffer), request.bytes);
}

Status Pager::Wait(int node, bool reads_only, double* waited_s) {
  std::unique_lock lock(mutex_);
  Grow(node);
  const size_t i = static_cast<size_t>(node);
  auto done = [&] { return !error_.ok() || (pending_in_[i] == 0 && (reads_only || pending_out_[i] == 0)); };
  if (!done()) {
    const double start = SteadyNowS();
    if (pending_in_[i] > 0) urgent_[i] = 1;  // needed now: read it whatever the reserve says
    changed_.notify_all();
    changed_.wait(lock, done);
    if (waited_s) *waited_s += SteadyNowS() - start;
  }
  return error_;
}

Status Pager::WaitRead(int node, double* waited_s) { return Wait(node, true, waited_s); }
Status Pager::WaitAll(int node, double* waited_s) { return Wait(node, false, waited_s); }

Status Pager::Drain(double* waited_s) {
  std::unique_lock lock(mutex_);
  const double start = SteadyNowS();
  bool waited = false;
  for (size_t i = 0; i < urgent_.size(); ++i) urgent_[i] = pending_in_[i] > 0;
  changed_.notify_all();
  changed_.wait(lock, [&] {
    if (!error_.ok()) return true;
    for (size_t i = 0; i < pending_in_.size(); ++i) {
      if (pending_in_[i] || pending_out_[i]) {
        waited = true;
        return false;
      }
    }
    return true;
  });
  if (waited && waited_s) *waited_s += SteadyNowS() - start;
  return error_;
}

bool Pager::Healthy() {
  std::lock_guard lock(mutex_);
  return error_.ok();
}

PagerStats Pager::TakeStats() {
  std::lock_guard lock(mutex_);
  PagerStats stats = stats_;
  stats_ = {};
  return stats;
}

std::vector<IoEvent> Pager::TakeEvents() {
  std::lock_guard lock(mutex_);
  return std::exchange(events_, {});
}

}  // namespace edgecost::train
