#include <algorithm>
#include <iostream>
#include <vector>

#include "cli/cli.h"
#include "cli/table.h"
#include "costdb/costdb.h"
#include "daemon/client.h"
#include "daemon/db_lock.h"
#include "service/words.h"

namespace edgecost::cli {
namespace {

struct JobsFlags {
  std::vector<uint64_t> ids;
  bool finished = false;  // forget: every job that is not queued or running
  bool json = false;
};

bool Active(const v1::Job& job) {
  return job.state() == v1::Job::STATE_QUEUED || job.state() == v1::Job::STATE_RUNNING;
}

void PrintJobs(const std::vector<v1::Job>& jobs, bool json) {
  if (json) {
    v1::ListJobsResponse response;
    for (const v1::Job& job : jobs) *response.add_jobs() = job;
    return PrintJson(response);
  }
  if (jobs.empty()) {
    std::cout << "no jobs\n";
    return;
  }
  Table table({{"id"},
               {"kind", Table::Align::kLeft},
               {"state", Table::Align::kLeft},
               {"progress"},
               {"crashes"},
               {"created", Table::Align::kLeft},
               {"message", Table::Align::kLeft}});
  for (const v1::Job& job : jobs) {
    table.AddRow({std::to_string(job.id()), job.kind(), std::string(service::JobStateText(job.state())),
                  std::to_string(static_cast<int>(job.progress() * 100 + 0.5)) + "%", std::to_string(job.crashes()),
                  job.created_at(), job.message()});
  }
  table.Print(std::cout);
}

// Changing jobs behind a running daemon's back would be undone by its next
// write: while one serves the database, changes go through it. The daemon's
// lock is taken for the change, so that a daemon started meanwhile (under any
// name of the file) waits for it instead of loading jobs half changed.
Result<daemon::DbLock> LockUnlessServed(const std::string& db_path, const std::string& what) {
  Result<daemon::DbLock> lock = daemon::DbLock::Acquire(db_path, "jobs");
  if (lock.ok()) return lock;
  std::string holder;
  if (const int pid = daemon::DbLock::Holder(db_path, &holder); pid && holder == "daemon") {
    return FailedPrecondition("a daemon (pid " + std::to_string(pid) + ") serves " + db_path + "; " + what);
  }
  return lock.status();
}

int RunList(const JobsFlags& flags, const Context& ctx) {
  std::vector<v1::Job> jobs;
  if (!ctx.remote.empty()) {
    v1::ListJobsRequest request;
    request.set_limit(0);
    v1::ListJobsResponse response;
    if (Status s = daemon::CallRemote(ctx.remote, "JobService/ListJobs", request, response); !s.ok()) return Failure(s);
    jobs.assign(response.jobs().begin(), response.jobs().end());
  } else {
    auto opened = ctx.Store(costdb::OpenMode::kReadOnly).Db();
    if (!opened.ok()) return Failure(opened.status());
    costdb::CostDb* db = *opened;
    auto stored = db->ListJobs();
    if (!stored.ok()) return Failure(stored.status());
    for (costdb::StoredJob& s : *stored) jobs.push_back(std::move(s.job));
  }
  PrintJobs(jobs, flags.json);
  return kExitOk;
}

int RunCancel(const JobsFlags& flags, const Context& ctx) {
  std::vector<v1::Job> cancelled;
  if (!ctx.remote.empty()) {
    for (uint64_t id : flags.ids) {
      v1::CancelJobRequest request;
      request.set_id(id);
      v1::Job job;
      if (Status s = daemon::CallRemote(ctx.remote, "JobService/CancelJob", request, job); !s.ok()) return Failure(s);
      cancelled.push_back(job);
    }
    PrintJobs(cancelled, flags.json);
    return kExitOk;
  }
  const std::string path = DbPath(ctx);
  Result<daemon::DbLock> lock = LockUnlessServed(path, "cancel through it with --remote unix:SOCKET");
  if (!lock.ok()) return Failure(lock.status());
  auto opened = ctx.Store(costdb::OpenMode::kReadWrite).Db();
  if (!opened.ok()) return Failure(opened.status());
  costdb::CostDb* db = *opened;
  auto stored = db->ListJobs();
  if (!stored.ok()) return Failure(stored.status());
  for (uint64_t id : flags.ids) {
    auto it =
        std::find_if(stored->begin(), stored->end(), [id](const costdb::StoredJob& s) { return s.job.id() == id; });
    if (it == stored->end()) return Failure(NotFound("no job " + std::to_string(id) + " in " + path));
    if (Active(it->job)) {  // a finished job stays as it is, as CancelJob leaves it
      it->job.set_state(v1::Job::STATE_CANCELLED);
      it->job.set_message("cancelled while no daemon ran");
      if (Status s = db->PutJob(*it); !s.ok()) return Failure(s);
    }
    cancelled.push_back(it->job);
  }
  PrintJobs(cancelled, flags.json);
  return kExitOk;
}

int RunForget(const JobsFlags& flags, const Context& ctx) {
  if (!ctx.remote.empty()) {
    return UsageError(InvalidArgument(
        "jobs forget changes the database itself: run it where the database is, with the daemon stopped"));
  }
  if (flags.ids.empty() == !flags.finished) {
    return UsageError(InvalidArgument("name the jobs to forget, or give --finished (not both)"));
  }
  const std::string path = DbPath(ctx);
  Result<daemon::DbLock> lock = LockUnlessServed(path, "stop it first (it would store its jobs again)");
  if (!lock.ok()) return Failure(lock.status());
  auto opened = ctx.Store(costdb::OpenMode::kReadWrite).Db();
  if (!opened.ok()) return Failure(opened.status());
  costdb::CostDb* db = *opened;
  std::vector<uint64_t> ids = flags.ids;
  if (flags.finished) {
    auto stored = db->ListJobs();
    if (!stored.ok()) return Failure(stored.status());
    for (const costdb::StoredJob& s : *stored) {
      if (!Active(s.job)) ids.push_back(s.job.id());
    }
  }
  for (uint64_t id : ids) {
    if (Status s = db->DeleteJob(id); !s.ok()) return Failure(s);
  }
  if (!flags.json) std::cout << ids.size() << (ids.size() == 1 ? " job" : " jobs") << " forgotten\n";
  return kExitOk;
}

}  // namespace

void RegisterJobsCommand(CLI::App& app, Context& ctx) {
  auto flags = std::make_shared<JobsFlags>();
  CLI::App* jobs = app.add_subcommand("jobs", "List, cancel or forget the daemon's jobs, with or without a daemon");
  jobs->add_flag("--json", flags->json, "Print JSON (edgecost.v1.ListJobsResponse)");
  jobs->footer(
      "Jobs are kept in the cost database. Without --remote these commands work on the database\n"
      "directly, which is how a job is cleared while the daemon is stopped; cancel and forget refuse\n"
      "while a daemon serves the database.\n\n"
      "Examples:\n"
      "  edgecost jobs\n"
      "  edgecost --remote unix:/run/edgecost/edgecost.sock jobs cancel 7\n"
      "  edgecost jobs forget 7\n"
      "  edgecost jobs forget --finished");
  jobs->callback([jobs, flags, &ctx] {
    if (jobs->get_subcommands().empty()) ctx.exit_code = RunList(*flags, ctx);
  });

  CLI::App* list = jobs->add_subcommand("list", "Every job, oldest first");
  list->add_flag("--json", flags->json, "Print JSON (edgecost.v1.ListJobsResponse)");
  list->callback([flags, &ctx] { ctx.exit_code = RunList(*flags, ctx); });

  CLI::App* cancel = jobs->add_subcommand("cancel", "Cancel queued or running jobs; finished ones stay as they are");
  cancel->add_option("ids", flags->ids, "Job ids")->required();
  cancel->add_flag("--json", flags->json, "Print JSON");
  cancel->callback([flags, &ctx] { ctx.exit_code = RunCancel(*flags, ctx); });

  CLI::App* forget = jobs->add_subcommand("forget", "Remove jobs from the database (the daemon must be stopped)");
  forget->add_option("ids", flags->ids, "Job ids");
  forget->add_flag("--finished", flags->finished, "Every job that is not queued or running");
  forget->callback([flags, &ctx] { ctx.exit_code = RunForget(*flags, ctx); });
}

}  // namespace edgecost::cli
