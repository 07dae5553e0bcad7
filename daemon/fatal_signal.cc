#include "daemon/fatal_signal.h"

#include <fcntl.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>

namespace edgecost::daemon {
namespace {

// Everything below runs in a signal handler: no allocation, no locks, no
// stdio; only open/read/write/close/clock_gettime/_exit (async-signal-safe).

struct Buffer {
  char text[8192];
  size_t size = 0;
  void Add(const char* s, size_t n) {
    for (size_t i = 0; i < n && size < sizeof text; ++i) text[size++] = s[i];
  }
  void Add(const char* s) { Add(s, std::strlen(s)); }
  void Number(uint64_t v, int width = 0, int base = 10) {
    char digits[24];
    int n = 0;
    do {
      digits[n++] = "0123456789abcdef"[v % base];
      v /= base;
    } while (v && n < 24);
    while (n < width && n < 24) digits[n++] = '0';
    while (n) Add(&digits[--n], 1);
  }
  void Quoted(const char* s) {  // a logfmt value, as daemon::Quoted writes it
    Add("\"");
    for (; *s; ++s) {
      if (*s == '"' || *s == '\\') Add("\\");
      Add(s, 1);
    }
    Add("\"");
  }
};

// The UTC time as spdlog's pattern prints it (2024-05-01T12:00:00.000Z): civil
// date from days since 1970 (H. Hinnant's algorithm), since gmtime_r may lock.
void AddTimestamp(Buffer& out) {
  timespec now{};
  ::clock_gettime(CLOCK_REALTIME, &now);
  const int64_t seconds = now.tv_sec, days = seconds / 86400, in_day = seconds % 86400;
  const int64_t z = days + 719468, era = z / 146097, doe = z - era * 146097;
  const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100), mp = (5 * doy + 2) / 153;
  const int64_t day = doy - (153 * mp + 2) / 5 + 1, month = mp < 10 ? mp + 3 : mp - 9;
  const int64_t year = yoe + era * 400 + (month <= 2);
  out.Number(static_cast<uint64_t>(year), 4);
  out.Add("-");
  out.Number(static_cast<uint64_t>(month), 2);
  out.Add("-");
  out.Number(static_cast<uint64_t>(day), 2);
  out.Add("T");
  out.Number(static_cast<uint64_t>(in_day / 3600), 2);
  out.Add(":");
  out.Number(static_cast<uint64_t>(in_day / 60 % 60), 2);
  out.Add(":");
  out.Number(static_cast<uint64_t>(in_day % 60), 2);
  out.Add(".");
  out.Number(static_cast<uint64_t>(now.tv_nsec / 1000000), 3);
  out.Add("Z");
}

uint64_t ParseHex(const char*& p) {
  uint64_t v = 0;
  for (;; ++p) {
    const char c = *p;
    if (c >= '0' && c <= '9')
      v = v * 16 + static_cast<uint64_t>(c - '0');
    else if (c >= 'a' && c <= 'f')
      v = v * 16 + static_cast<uint64_t>(c - 'a' + 10);
    else
      return v;
  }
}

// Finds the file mapped at `address` in /proc/self/maps ("start-end perms offset dev inode   path").
bool MappedFile(uintptr_t address, char* path, size_t path_size) {
  const int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char line[4352];
  size_t length = 0;
  char chunk[4096];
  bool found = false;
  ssize_t n = 0;
  while (!found && (n = ::read(fd, chunk, sizeof chunk)) > 0) {
    for (ssize_t i = 0; i < n && !found; ++i) {
      if (chunk[i] != '\n') {
        if (length < sizeof line - 1) line[length++] = chunk[i];
        continue;
      }
      line[length] = '\0';
      length = 0;
      const char* p = line;
      const uint64_t start = ParseHex(p);
      if (*p++ != '-') continue;
      const uint64_t end = ParseHex(p);
      if (address < start || address >= end) continue;
      for (int field = 0; field < 4 && *p; ++field) {  // perms, offset, dev, inode
        while (*p == ' ') ++p;
        while (*p && *p != ' ') ++p;
      }
      while (*p == ' ') ++p;
      if (*p != '/') break;  // anonymous memory, a stack: not a file
      size_t k = 0;
      for (; p[k] && k < path_size - 1; ++k) path[k] = p[k];
      path[k] = '\0';
      found = true;
    }
  }
  ::close(fd);
  return found;
}

void OnSigbus(int, siginfo_t* info, void*) {
  const uintptr_t address = reinterpret_cast<uintptr_t>(info->si_addr);
  char path[4096];
  const bool in_file = MappedFile(address, path, sizeof path);
  Buffer out;
  AddTimestamp(out);
  out.Add(" level=critical event=fatal signal=SIGBUS address=0x");
  out.Number(address, 0, 16);
  if (in_file) {
    out.Add(" file=");
    out.Quoted(path);
    out.Add(" message=\"the file shrank while the daemon had it mapped (someone truncated it); exiting");
    const size_t n = std::strlen(path);
    if (n > 4 && std::strcmp(path + n - 4, "-shm") == 0) {
      out.Add(": the database is intact, and a restart rebuilds its shared-memory index");
    }
    out.Add("\"\n");
  } else {
    out.Add(" message=\"not in a mapped file: a bug; dumping core\"\n");
  }
  [[maybe_unused]] const ssize_t written = ::write(STDERR_FILENO, out.text, out.size);
  if (in_file) ::_exit(1);
  ::signal(SIGBUS, SIG_DFL);  // returning re-runs the access, which now dumps core
}

}  // namespace

void InstallSigbusHandler() {
  struct sigaction action {};
  action.sa_sigaction = OnSigbus;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGBUS, &action, nullptr);
}

}  // namespace edgecost::daemon
