// The cost database of one process: one check, then a connection per thread.
#include "costdb/store.h"

#include <utility>

#include "costdb/postgres.h"

namespace edgecost::costdb {

Store::Store(std::string path, OpenMode mode) : path_(std::move(path)), mode_(mode) {}

Status Store::Check() {
  std::lock_guard lock(mutex_);
  return CheckLocked();
}

Status Store::CheckLocked() {
  if (checked_) return Status::Ok();
  EC_ASSIGN_OR_RETURN(CostDb first, CostDb::Open(path_, OpenOptions{.mode = mode_}));
  connections_.insert_or_assign(std::this_thread::get_id(), std::move(first));
  checked_ = true;
  return Status::Ok();
}

Result<CostDb*> Store::Db() {
  std::lock_guard lock(mutex_);
  EC_RETURN_IF_ERROR(CheckLocked());
  auto it = connections_.find(std::this_thread::get_id());
  if (it == connections_.end()) {
    EC_ASSIGN_OR_RETURN(CostDb db, CostDb::Open(path_, OpenOptions{.mode = mode_, .checked = true}));
    it = connections_.emplace(std::this_thread::get_id(), std::move(db)).first;
  }
  return &it->second;
}

Result<CostDb> Store::OpenConnection() {
  EC_RETURN_IF_ERROR(Check());
  return CostDb::Open(path_, OpenOptions{.mode = mode_, .checked = true});
}

std::string Store::printable_path() const { return RedactUrl(path_); }

}  // namespace edgecost::costdb
