// What makes a daemon itself: the database it serves, whatever the name it was
// given, and the socket file it made. Each test reproduces an attack on a real
// `edgecost serve`: a second daemon on one database through another name, and a
// daemon that removed another one's socket when it stopped.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "daemon/db_lock.h"
#include "daemon/fatal_signal.h"
#include "tests/daemon/serve_process.h"

namespace edgecost {
namespace {

namespace fs = std::filesystem;
using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::Not;
using namespace test_support;

class DaemonIdentityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("edgecost_identity_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "real");
  }
  void TearDown() override {
    for (pid_t pid : pids_) StopProcess(pid);
    fs::remove_all(dir_);
  }

  pid_t Serve(const std::string& db, const std::string& socket, const std::string& log = "serve.log") {
    const pid_t pid = SpawnServe({"--db", db, "serve", "--socket", socket}, socket, "/nonexistent-sysfs", dir_ / log);
    pids_.push_back(pid);
    return pid;
  }
  void Stop(pid_t pid) {
    StopProcess(pid);
    std::erase(pids_, pid);
  }
  bool Alive(pid_t pid) { return ::waitpid(pid, nullptr, WNOHANG) == 0; }
  std::string Log(const std::string& name = "serve.log") { return Shell("cat " + (dir_ / name).string()); }
  // `edgecost ARGS` with its output and exit code ("... exit=N").
  std::string Edgecost(const std::string& args) {
    return Shell(std::string(EDGECOST_BIN) + " " + args + "; echo exit=$?");
  }

  fs::path dir_;
  std::vector<pid_t> pids_;
};

TEST(ResolvedDbPath, EveryNameOfOneFileResolvesToOnePath) {
  const fs::path dir = fs::temp_directory_path() / ("edgecost_resolved_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "real");
  const fs::path real = fs::canonical(dir / "real") / "costs.db";  // not created: a daemon creates it
  fs::create_directory_symlink("real", dir / "link");
  fs::create_symlink("real/costs.db", dir / "dangling.db");  // SQLite would create the file it points at
  fs::create_symlink("dangling.db", dir / "chain.db");
  for (const fs::path& name : {dir / "real/costs.db", dir / "link/costs.db", dir / "real/../link/./costs.db",
                               dir / "dangling.db", dir / "chain.db"}) {
    EXPECT_EQ(daemon::ResolvedDbPath(name.string()), real.string()) << name;
  }
  fs::remove_all(dir);
}

// Attack 4: a second daemon through a symlinked path ran beside the first; job
// ids collided, and `jobs forget` through the link deleted a running daemon's job.
TEST_F(DaemonIdentityTest, OneDaemonPerDatabaseWhateverItsName) {
  fs::create_directory_symlink("real", dir_ / "link");
  fs::create_symlink("real/costs.db", dir_ / "alias.db");
  const std::string db = (dir_ / "real/costs.db").string(), socket = (dir_ / "a.sock").string();
  const pid_t first = Serve(db, socket);
  ASSERT_TRUE(Serving(socket)) << Log();
  const std::string job = CallJson(socket, "JobService/StartProfile", R"({"model":"linear","threads":1})");
  ASSERT_THAT(job, EndsWith(" 200"));

  for (const fs::path& name : {dir_ / "link/costs.db", dir_ / "alias.db", dir_ / "real/../link/costs.db"}) {
    const std::string second =
        Edgecost("--db " + name.string() + " serve --socket " + (dir_ / "b.sock").string() + " 2>&1");
    EXPECT_THAT(second, HasSubstr("another edgecost daemon (pid " + std::to_string(first) + ")")) << name;
    EXPECT_THAT(second, EndsWith("exit=1\n")) << name;
    const std::string forget = Edgecost("--db " + name.string() + " jobs forget 1 2>&1");
    EXPECT_THAT(forget, HasSubstr("a daemon (pid " + std::to_string(first) + ")")) << name;
    EXPECT_THAT(forget, EndsWith("exit=1\n")) << name;
    EXPECT_THAT(Edgecost("--db " + name.string() + " jobs cancel 1 2>&1"), EndsWith("exit=1\n")) << name;
  }
  EXPECT_FALSE(fs::exists(dir_ / "b.sock"));
  EXPECT_TRUE(Alive(first));
  EXPECT_THAT(CallJson(socket, "JobService/GetJob", R"({"id":"1"})"), EndsWith(" 200"));  // not forgotten
}

// `jobs cancel` and `jobs forget` hold the lock while they write: a daemon
// started meanwhile, under another name of the file, waits for them.
TEST_F(DaemonIdentityTest, ADaemonIsRefusedWhileJobsChangesTheDatabase) {
  fs::create_directory_symlink("real", dir_ / "link");
  {
    Result<daemon::DbLock> held = daemon::DbLock::Acquire((dir_ / "link/costs.db").string(), "jobs");
    ASSERT_TRUE(held.ok()) << held.status().message();
    const std::string refused = Edgecost("--db " + (dir_ / "real/costs.db").string() + " serve --socket " +
                                         (dir_ / "a.sock").string() + " 2>&1");
    EXPECT_THAT(refused, HasSubstr("`edgecost jobs` (pid " + std::to_string(::getpid()) + ") is changing"));
    EXPECT_THAT(refused, EndsWith("exit=1\n"));
  }  // released
  const pid_t pid = Serve((dir_ / "real/costs.db").string(), (dir_ / "a.sock").string());
  EXPECT_TRUE(Serving((dir_ / "a.sock").string())) << Log();
  EXPECT_TRUE(Alive(pid));
}

// Attack 8: daemon A's socket folder was removed, daemon B started on the same
// path, and A, stopped, removed B's socket: B ran on, unreachable.
TEST_F(DaemonIdentityTest, AStoppedDaemonLeavesAnotherDaemonsSocket) {
  const std::string socket = (dir_ / "run/edgecost.sock").string();
  const pid_t a = Serve((dir_ / "real/a.db").string(), socket, "a.log");
  ASSERT_TRUE(Serving(socket)) << Log("a.log");
  fs::remove_all(dir_ / "run");
  const pid_t b = Serve((dir_ / "real/b.db").string(), socket, "b.log");
  ASSERT_TRUE(Serving(socket)) << Log("b.log");
  Stop(a);
  EXPECT_TRUE(fs::is_socket(socket));
  EXPECT_TRUE(Serving(socket));
  EXPECT_TRUE(Alive(b));
  // And A, given SIGHUP before it stops, does not take B's path either.
  const pid_t c = Serve((dir_ / "real/c.db").string(), (dir_ / "c.sock").string(), "c.log");
  ASSERT_TRUE(Serving((dir_ / "c.sock").string()));
  fs::remove(dir_ / "c.sock");
  fs::create_symlink(socket, dir_ / "c.sock");  // the path now leads to B's live socket
  ::kill(c, SIGHUP);
  EXPECT_THAT(PollUntil([&] { return Log("c.log"); },
                        [](const std::string& log) { return log.find("event=socket_lost") != std::string::npos; }),
              HasSubstr("another edgecost daemon is serving on"));
  Stop(c);
  EXPECT_TRUE(Serving(socket));
}

// A daemon whose socket file vanished binds it again on SIGHUP, and says so;
// when it cannot, it says why, serves on, and tries again at the next SIGHUP.
TEST_F(DaemonIdentityTest, SighupRecreatesAVanishedSocket) {
  const std::string socket = (dir_ / "run/edgecost.sock").string();
  const pid_t pid = Serve((dir_ / "real/costs.db").string(), socket);
  ASSERT_TRUE(Serving(socket)) << Log();
  fs::remove_all(dir_ / "run");
  EXPECT_FALSE(Serving(socket));
  ::kill(pid, SIGHUP);
  EXPECT_TRUE(PollUntil([&] { return Serving(socket) ? "yes" : "no"; },
                        [](const std::string& s) { return s == "yes"; }) == "yes");
  EXPECT_THAT(Log(), HasSubstr("event=socket_recreated path=\"" + socket + "\" why=SIGHUP"));
  EXPECT_THAT(CallJson(socket, "CostService/GetCostTable", R"({"model":"linear","device":"a72"})"), EndsWith(" 200"));

  fs::remove_all(dir_ / "run");
  std::ofstream(dir_ / "run") << "a file where the socket's folder was\n";
  ::kill(pid, SIGHUP);
  const std::string lost = PollUntil(
      [&] { return Log(); }, [](const std::string& log) { return log.find("event=socket_lost") != std::string::npos; });
  EXPECT_THAT(lost, HasSubstr("event=socket_lost path=\"" + socket + "\""));
  EXPECT_THAT(lost, HasSubstr("Not a directory"));
  EXPECT_TRUE(Alive(pid));
  fs::remove(dir_ / "run");
  ::kill(pid, SIGHUP);
  EXPECT_TRUE(PollUntil([&] { return Serving(socket) ? "yes" : "no"; },
                        [](const std::string& s) { return s == "yes"; }) == "yes");
  Stop(pid);
  EXPECT_FALSE(fs::exists(socket));  // its own socket, it removes
  EXPECT_THAT(Log(), Not(HasSubstr("level=critical")));
}

// Attack 11: the database's -shm made unusable. One that is not a regular file,
// or that this user may not write (chattr +i: chmod does not stop root), is
// refused at start, naming the file.
TEST_F(DaemonIdentityTest, AnUnusableShmFileIsRefusedAtStart) {
  const std::string db = (dir_ / "real/costs.db").string(), socket = (dir_ / "a.sock").string();
  const pid_t pid = Serve(db, socket);  // creates the database, in WAL mode
  ASSERT_TRUE(Serving(socket)) << Log();
  Stop(pid);
  const std::string serve = "--db " + db + " serve --socket " + socket + " 2>&1";
  fs::remove(db + "-shm");
  fs::create_directory(db + "-shm");
  std::string refused = Edgecost(serve);
  EXPECT_THAT(refused, HasSubstr(db + "-shm is not a regular file"));
  EXPECT_THAT(refused, EndsWith("exit=1\n"));
  fs::remove(db + "-shm");

  std::ofstream(db + "-shm").close();
  if (testing::RunShell("chattr +i " + db + "-shm").exit_code != 0) {
    fs::remove(db + "-shm");
    GTEST_SKIP() << "chattr +i does not work here; the unwritable case is not tested";
  }
  refused = Edgecost(serve);
  EXPECT_THAT(Edgecost("--db " + db + " jobs forget --finished 2>&1"), HasSubstr("-shm is not readable and writable"));
  EXPECT_THAT(Edgecost("--db " + db + " jobs 2>&1"), EndsWith("exit=0\n"));  // readers only need to read it
  Shell("chattr -i " + db + "-shm");
  EXPECT_THAT(refused, HasSubstr(db + "-shm is not readable and writable (Operation not permitted)"));
  EXPECT_THAT(refused, EndsWith("exit=1\n"));
  EXPECT_TRUE(Alive(Serve(db, socket)));  // fixed: it starts
}

// Attack 11, while serving: the -shm truncated (and made read-only) under a
// running daemon killed it with SIGBUS. Now it exits with the reason, or, if
// it had no mapping at the time, serves on; it is never killed by the signal.
TEST_F(DaemonIdentityTest, AShmTruncatedUnderTheDaemonEndsItWithTheReason) {
  const std::string db = (dir_ / "real/costs.db").string(), socket = (dir_ / "a.sock").string();
  const pid_t pid = Serve(db, socket);
  ASSERT_TRUE(Serving(socket)) << Log();
  ASSERT_THAT(CallJson(socket, "SolverService/Solve", R"({"model":"linear","device":"a72","activationBudgetBytes":"4000"})"),
              EndsWith(" 200"));
  ASSERT_TRUE(fs::exists(db + "-shm"));
  fs::resize_file(db + "-shm", 0);
  fs::permissions(db + "-shm", fs::perms::owner_read | fs::perms::group_read | fs::perms::others_read);
  CallJson(socket, "JobService/ListJobs", "{}");
  CallJson(socket, "SolverService/Solve", R"({"model":"linear","device":"a72","activationBudgetBytes":"5000"})");
  int status = 0;
  const std::string ended = PollUntil([&] { return ::waitpid(pid, &status, WNOHANG) == pid ? "ended" : "running"; },
                                      [](const std::string& s) { return s == "ended"; });
  if (ended == "running") {
    EXPECT_TRUE(Serving(socket));
    return;
  }
  std::erase(pids_, pid);
  EXPECT_FALSE(WIFSIGNALED(status)) << "killed by signal " << WTERMSIG(status) << "; its log:\n" << Log();
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1);
  EXPECT_THAT(Log(), HasSubstr("level=critical event=fatal signal=SIGBUS"));
  EXPECT_THAT(Log(), HasSubstr("file=\"" + fs::canonical(db).string() + "-shm\""));
  EXPECT_TRUE(Alive(Serve(db, socket)));  // a restart rebuilds the index
  EXPECT_THAT(CallJson(socket, "SolverService/GetSchedule", R"({"id":"1"})"), EndsWith(" 200"));
}

// The handler itself, in a child process: a mapped file truncated under it.
TEST(SigbusHandler, AShrunkMappedFileEndsTheProcessWithTheFileNamed) {
  const fs::path dir = fs::temp_directory_path() / ("edgecost_sigbus_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path file = dir / "costs.db-shm", log = dir / "stderr.log";
  const pid_t child = ::fork();
  if (child == 0) {
    if (!std::freopen(log.c_str(), "w", stderr)) ::_exit(126);
    daemon::InstallSigbusHandler();
    const int fd = ::open(file.c_str(), O_RDWR | O_CREAT, 0644);
    if (fd < 0 || ::ftruncate(fd, 32768) != 0) ::_exit(125);
    auto* map = static_cast<volatile char*>(::mmap(nullptr, 32768, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0));
    if (map == MAP_FAILED) ::_exit(124);
    map[0] = 1;
    if (::ftruncate(fd, 0) != 0) ::_exit(123);
    map[4096] = 1;  // SIGBUS
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  const std::string text = Shell("cat " + log.string());
  EXPECT_THAT(text, ::testing::MatchesRegex(
                        "[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z level=critical event=fatal "
                        "signal=SIGBUS address=0x[0-9a-f]+ file=\"[^\"]*costs\\.db-shm\" message=\"[^\"]*restart "
                        "rebuilds[^\"]*\"\n"));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace edgecost
