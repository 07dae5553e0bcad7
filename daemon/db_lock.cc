#include "daemon/db_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "costdb/postgres.h"

namespace edgecost::daemon {
namespace {

namespace fs = std::filesystem;

std::string LockPath(const std::string& db_path) { return ResolvedDbPath(db_path) + ".lock"; }

// The lock file holds "PID HOLDER\n" ("1234 daemon"); only the messages read it.
std::string ReadHolder(int fd, int& pid) {
  char text[64] = {};
  const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
  pid = n > 0 ? std::atoi(text) : 0;
  std::string line(text, n > 0 ? static_cast<size_t>(n) : 0);
  const size_t space = line.find(' ');
  if (space == std::string::npos) return "daemon";  // written by an older edgecost: only a daemon locked
  line = line.substr(space + 1);
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
  return line.empty() ? "daemon" : line;
}

}  // namespace

std::string ResolvedDbPath(const std::string& db_path) {
  std::error_code ec;
  fs::path path = fs::absolute(db_path, ec);
  if (ec) return db_path;
  // weakly_canonical stops at a dangling symlink, yet SQLite would create the
  // file it points at: follow the chain at the end by hand (bounded, as the kernel is).
  for (int hops = 0; hops < 40 && fs::is_symlink(fs::symlink_status(path, ec)); ++hops) {
    const fs::path target = fs::read_symlink(path, ec);
    if (ec) break;
    path = target.is_absolute() ? target : path.parent_path() / target;
  }
  const fs::path resolved = fs::weakly_canonical(path, ec);
  return ec ? path.lexically_normal().string() : resolved.string();
}

Result<DbLock> DbLock::Acquire(const std::string& db_path, std::string_view holder_name) {
  // A PostgreSQL store has no file to lock: the lock is the server's, held by a connection.
  if (costdb::IsPostgresUrl(db_path)) {  // one key for the daemon and `edgecost jobs`, as one lock file
    EC_ASSIGN_OR_RETURN(costdb::Db connection, costdb::LockPostgresStore(db_path, "daemon"));
    DbLock lock(-1);
    lock.store_ = std::make_shared<costdb::Db>(std::move(connection));
    return lock;
  }
  std::error_code ec;
  const std::string path = LockPath(db_path);
  fs::create_directories(fs::path(path).parent_path(), ec);
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return PermissionDenied("cannot open " + path + ": " + std::strerror(errno));
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int holder = 0;
    const std::string who = ReadHolder(fd, holder);
    ::close(fd);
    const std::string pid = holder ? " (pid " + std::to_string(holder) + ")" : std::string();
    const std::string resolved = ResolvedDbPath(db_path);
    const std::string named = resolved == db_path ? db_path : db_path + " (" + resolved + ")";
    if (who == "daemon") {
      return FailedPrecondition("another edgecost daemon" + pid + " serves " + named +
                                "; stop it, or give this one another --db");
    }
    return FailedPrecondition("`edgecost " + who + "`" + pid + " is changing " + named + "; retry when it finishes");
  }
  // The pid only serves the message a second daemon prints: the lock holds without it.
  const std::string pid = std::to_string(::getpid()) + " " + std::string(holder_name) + "\n";
  [[maybe_unused]] const bool written =
      ::ftruncate(fd, 0) == 0 && ::pwrite(fd, pid.data(), pid.size(), 0) == static_cast<ssize_t>(pid.size());
  return DbLock(fd);
}

int DbLock::Holder(const std::string& db_path, std::string* holder_name) {
  if (costdb::IsPostgresUrl(db_path)) return 0;
  const int fd = ::open(LockPath(db_path).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  int holder = 0;
  if (::flock(fd, LOCK_SH | LOCK_NB) != 0) {
    const std::string who = ReadHolder(fd, holder);
    if (holder_name) *holder_name = who;
    holder = std::max(1, holder);
  }
  ::close(fd);
  return holder;
}

DbLock& DbLock::operator=(DbLock&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    other.fd_ = -1;
    store_ = std::move(other.store_);
  }
  return *this;
}

DbLock::~DbLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace edgecost::daemon
