#include "costdb/sql.h"

namespace edgecost::costdb {

const char* BackendName(Backend backend) { return backend == Backend::kPostgres ? "postgresql" : "sqlite"; }

Result<bool> Statement::Step() {
  if (!bind_error_.empty()) {
    return Internal("binding a parameter of " + impl_->Sql().substr(0, 80) + ": " + bind_error_);
  }
  return impl_->Step();
}

Status Statement::Run() {
  Result<bool> row = Step();
  impl_->Reset();
  bind_error_.clear();
  return row.status();
}

Result<Statement> Db::Prepare(std::string_view sql) {
  EC_ASSIGN_OR_RETURN(std::unique_ptr<StatementImpl> impl, connection_->Prepare(sql));
  return Statement(std::move(impl));
}

Result<int64_t> Db::QueryInt(std::string_view sql) {
  EC_ASSIGN_OR_RETURN(Statement stmt, Prepare(sql));
  EC_ASSIGN_OR_RETURN(bool row, stmt.Step());
  if (!row) return Internal(path() + ": no result from " + std::string(sql));
  return stmt.Int(0);
}

Result<Transaction> Transaction::Begin(Db& db, Kind kind) {
  if (db.tx_ != Db::TxKind::kNone || db.InTransaction()) {
    if (kind == Kind::kWrite && db.tx_ == Db::TxKind::kRead) {
      return Internal("bug: a write inside a read transaction on " + db.path());
    }
    return Transaction(nullptr);  // joined: the outer transaction decides
  }
  EC_RETURN_IF_ERROR(db.connection_->Begin(kind == Kind::kWrite));
  db.tx_ = kind == Kind::kWrite ? Db::TxKind::kWrite : Db::TxKind::kRead;
  return Transaction(&db);
}

Transaction::~Transaction() {
  if (!db_) return;
  db_->connection_->Rollback();
  db_->tx_ = Db::TxKind::kNone;
}

Status Transaction::Commit() {
  if (!db_) return Status::Ok();
  EC_RETURN_IF_ERROR(db_->connection_->Commit());  // on failure the destructor rolls back
  db_->tx_ = Db::TxKind::kNone;
  db_ = nullptr;
  return Status::Ok();
}

}  // namespace edgecost::costdb
