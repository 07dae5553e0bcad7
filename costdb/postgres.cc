#include "costdb/postgres.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include <pqxx/pqxx>

namespace edgecost::costdb {
namespace {

constexpr unsigned kByteaOid = 17;
constexpr int kReconnectPauseMs = 100;

// Where a URL holds passwords, as (offset, length): its user info's and each password= parameter's.
std::vector<std::pair<size_t, size_t>> PasswordSpans(std::string_view url) {
  std::vector<std::pair<size_t, size_t>> spans;
  const size_t scheme = url.find("://");
  if (scheme != std::string_view::npos) {
    const size_t start = scheme + 3;
    const size_t at = url.find('@', start);
    const size_t slash = url.find_first_of("/?", start);
    if (at != std::string_view::npos && (slash == std::string_view::npos || at < slash)) {
      const size_t colon = url.find(':', start);
      if (colon != std::string_view::npos && colon < at) spans.emplace_back(colon + 1, at - colon - 1);
    }
  }
  for (size_t pos = url.find("password="); pos != std::string_view::npos; pos = url.find("password=", pos + 1)) {
    if (pos > 0 && url[pos - 1] != '?' && url[pos - 1] != '&') continue;
    const size_t value = pos + 9;
    const size_t end = std::min(url.find('&', value), url.size());
    spans.emplace_back(value, end - value);
  }
  return spans;
}

// The password the connection uses (a password= parameter overrides the user info's), if any.
std::string PasswordOf(std::string_view url) {
  const auto spans = PasswordSpans(url);
  return spans.empty() ? "" : std::string(url.substr(spans.back().first, spans.back().second));
}

std::string ScrubPassword(std::string text, const std::string& password) {
  if (password.empty()) return text;
  for (size_t pos = text.find(password); pos != std::string::npos; pos = text.find(password, pos + 3)) {
    text.replace(pos, password.size(), "***");
  }
  return text;
}

std::string OneLine(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

// `?` and `?NNN` placeholders (outside quotes) to PostgreSQL's $1, $2, ...; `count` gets how many
// parameters the statement has.
std::string Placeholders(std::string_view sql, size_t& count) {
  std::string out;
  out.reserve(sql.size() + 16);
  int next = 1;
  char quote = 0;
  for (size_t i = 0; i < sql.size(); ++i) {
    const char c = sql[i];
    if (quote) {
      if (c == quote) quote = 0;
      out += c;
    } else if (c == '\'' || c == '"') {
      quote = c;
      out += c;
    } else if (c == '?' && i + 1 < sql.size() && sql[i + 1] >= '0' && sql[i + 1] <= '9') {
      out += '$';  // ?NNN, numbered: the same in both
      count = std::max(count, static_cast<size_t>(std::atoi(sql.data() + i + 1)));
    } else if (c == '?') {
      count = std::max(count, static_cast<size_t>(next));
      out += "$" + std::to_string(next++);
    } else {
      out += c;
    }
  }
  return out;
}

std::string HexBytea(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "\\x";
  out.reserve(2 + 2 * bytes.size());
  for (const unsigned char c : bytes) {
    out += kHex[c >> 4];
    out += kHex[c & 0xF];
  }
  return out;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return 0;
}

class PgConnection;

class PgStatement final : public StatementImpl {
 public:
  PgStatement(PgConnection* connection, std::string_view sql)
      : connection_(connection), sql_(Placeholders(sql, parameters_)) {
    params_.resize(parameters_);
  }

  void BindInt(int index, int64_t value) override { Set(index, std::to_string(value)); }
  void BindDouble(int index, double value) override {
    if (std::isnan(value)) return Set(index, "NaN");
    if (std::isinf(value)) return Set(index, value > 0 ? "Infinity" : "-Infinity");
    char text[32];
    const auto [end, ec] = std::to_chars(text, text + sizeof text, value);  // shortest that reads back equal
    Set(index, std::string(text, end));
  }
  void BindText(int index, std::string_view text) override { Set(index, std::string(text)); }
  void BindBlob(int index, std::string_view bytes) override { Set(index, HexBytea(bytes)); }
  void BindNull(int index) override { Set(index, std::nullopt); }
  Result<bool> Step() override;
  void Reset() override {
    result_.reset();
    params_.assign(parameters_, std::nullopt);
  }
  int64_t Int(int column) const override {
    const pqxx::field field = Field(column);
    if (field.is_null()) return 0;
    const char* text = field.c_str();
    if (text[0] == 't' && text[1] == '\0') return 1;  // a boolean expression's true
    if (text[0] == 'f' && text[1] == '\0') return 0;
    return std::strtoll(text, nullptr, 10);
  }
  double Double(int column) const override {
    const pqxx::field field = Field(column);
    return field.is_null() ? 0.0 : std::strtod(field.c_str(), nullptr);
  }
  std::string Text(int column) const override {
    const pqxx::field field = Field(column);
    return field.is_null() ? std::string() : std::string(field.c_str(), field.size());
  }
  std::string Blob(int column) const override {
    const pqxx::field field = Field(column);
    if (field.is_null()) return std::string();
    if (static_cast<unsigned>(result_->column_type(column)) != kByteaOid) return Text(column);
    // bytea's text output is hex: \x0a1b...
    const std::string_view hex(field.c_str(), field.size());
    std::string bytes;
    if (hex.size() < 2) return bytes;
    bytes.reserve((hex.size() - 2) / 2);
    for (size_t i = 2; i + 1 < hex.size(); i += 2) {
      bytes += static_cast<char>(HexDigit(hex[i]) << 4 | HexDigit(hex[i + 1]));
    }
    return bytes;
  }
  bool IsNull(int column) const override { return Field(column).is_null(); }
  std::string Sql() const override { return sql_; }

 private:
  void Set(int index, std::optional<std::string> value) {
    if (index < 1) return;
    if (params_.size() < static_cast<size_t>(index)) params_.resize(static_cast<size_t>(index));
    params_[static_cast<size_t>(index) - 1] = std::move(value);
  }
  pqxx::field Field(int column) const { return (*result_)[static_cast<pqxx::result::size_type>(row_)][column]; }

  PgConnection* connection_;
  size_t parameters_ = 0;  // before sql_: counted while sql_ is made
  std::string sql_;
  std::vector<std::optional<std::string>> params_;  // unset ones are NULL, as in SQLite
  std::optional<pqxx::result> result_;              // set while the rows of one execution are read
  size_t row_ = 0;
};

class PgConnection final : public Connection {
 public:
  PgConnection(std::string url, std::string name, bool read_only, int busy_timeout_ms)
      : url_(std::move(url)),
        name_(std::move(name)),
        password_(PasswordOf(url_)),
        read_only_(read_only),
        busy_timeout_ms_(busy_timeout_ms) {}

  Backend backend() const override { return Backend::kPostgres; }
  const std::string& name() const override { return name_; }
  Status Exec(std::string_view sql) override { return Execute(std::string(sql), {}).status(); }
  Result<std::unique_ptr<StatementImpl>> Prepare(std::string_view sql) override {
    return std::unique_ptr<StatementImpl>(std::make_unique<PgStatement>(this, sql));
  }
  Result<int64_t> LastInsertId() override {
    EC_ASSIGN_OR_RETURN(pqxx::result rows, Execute("SELECT lastval()", {}));
    return rows[0][0].as<int64_t>();
  }
  int Changes() const override { return changes_; }
  bool InTransaction() const override { return in_tx_; }
  Status Begin(bool write) override {
    EC_RETURN_IF_ERROR(Connect());
    failed_in_tx_ = false;
    // A write waits for the schema's other writers (at most the busy timeout; 0 would wait forever), then reads what
    // they committed: READ COMMITTED takes a new snapshot per statement, after the lock.
    const std::string sql = write ? "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL lock_timeout = " +
                                        std::to_string(std::max(1, busy_timeout_ms_)) +
                                        "; SELECT pg_advisory_xact_lock(hashtext(current_schema()))"
                                  : std::string("BEGIN ISOLATION LEVEL REPEATABLE READ");
    in_tx_ = true;
    Status begun = Execute(sql, {}).status();
    if (!begun.ok()) Rollback();
    return begun;
  }
  Status Commit() override {
    if (failed_in_tx_) {
      return Internal(name_ + ": not committing a transaction in which a statement failed");
    }
    Status committed = Execute("COMMIT", {}).status();
    if (committed.ok()) {
      in_tx_ = false;
    } else if (broken_) {
      in_tx_ = false;
      return Unavailable(name_ + ": the connection was lost while committing, so the write may or may not be " +
                         "stored: " + std::string(committed.message()));
    }
    return committed;
  }
  void Rollback() override {
    if (!in_tx_) return;
    in_tx_ = false;
    if (!broken_ && conn_) (void)Execute("ROLLBACK", {});
  }
  Result<int64_t> SchemaVersion() override {
    EC_ASSIGN_OR_RETURN(pqxx::result exists, Execute("SELECT to_regclass('edgecost_schema_version') IS NOT NULL", {}));
    if (std::string_view(exists[0][0].c_str()) != "t") return int64_t{0};
    EC_ASSIGN_OR_RETURN(pqxx::result version,
                        Execute("SELECT coalesce(max(version), 0) FROM edgecost_schema_version", {}));
    return version[0][0].as<int64_t>();
  }
  Status SetSchemaVersion(int64_t version) override {
    return Exec(
        "CREATE TABLE IF NOT EXISTS edgecost_schema_version (version BIGINT NOT NULL); "
        "DELETE FROM edgecost_schema_version; INSERT INTO edgecost_schema_version (version) VALUES (" +
        std::to_string(version) + ")");
  }

  // Opens the connection if there is none or it broke, retrying for the busy timeout while the
  // server refuses (starting up, restarting). Never inside a transaction: that one is lost.
  Status Connect();
  Result<pqxx::result> Execute(const std::string& sql, const std::vector<std::optional<std::string>>& params);

 private:
  Status Error(const std::exception& error, std::string_view what);

  std::string url_;  // secret: has the password
  std::string name_;
  std::string password_;
  bool read_only_;
  int busy_timeout_ms_;
  std::unique_ptr<pqxx::connection> conn_;
  bool broken_ = false;
  bool in_tx_ = false;
  bool failed_in_tx_ = false;
  int changes_ = 0;
};

Status PgConnection::Connect() {
  if (conn_ && !broken_ && conn_->is_open()) return Status::Ok();
  if (in_tx_) return Unavailable(name_ + ": the connection was lost inside a transaction; retry it");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(busy_timeout_ms_);
  for (;;) {
    Status error;
    try {
      conn_.reset();
      auto conn = std::make_unique<pqxx::connection>(url_);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
      // A broken connection must fail loudly: a silent reconnect inside a transaction would run
      // its remaining statements outside it.
      conn->inhibit_reactivation(true);
#pragma GCC diagnostic pop
      pqxx::nontransaction setup(*conn);
      setup.exec(std::string("SET application_name = 'edgecost'; SET default_transaction_read_only = ") +
                 (read_only_ ? "on" : "off"));
      setup.commit();
      conn_ = std::move(conn);
      broken_ = false;
      return Status::Ok();
    } catch (const std::exception& e) {
      broken_ = true;
      error = Error(e, "connecting");
    }
    if (error.code() != ErrorCode::kUnavailable || std::chrono::steady_clock::now() >= deadline) return error;
    std::this_thread::sleep_for(std::chrono::milliseconds(kReconnectPauseMs));
  }
}

Result<pqxx::result> PgConnection::Execute(const std::string& sql,
                                           const std::vector<std::optional<std::string>>& params) {
  if (in_tx_ && failed_in_tx_) {
    return Internal(name_ + ": a statement after a failed one in the same transaction: " + sql.substr(0, 80));
  }
  if (!in_tx_) EC_RETURN_IF_ERROR(Connect());
  if (!conn_ || broken_) {
    failed_in_tx_ = in_tx_;
    return Unavailable(name_ + ": the connection was lost inside a transaction, which is rolled back; retry it");
  }
  try {
    pqxx::nontransaction work(*conn_);  // BEGIN/COMMIT are ours: work only carries statements
    pqxx::result rows =
        params.empty() ? work.exec(sql) : work.exec_params(sql, pqxx::prepare::make_dynamic_params(params));
    changes_ = static_cast<int>(rows.affected_rows());
    return rows;
  } catch (const std::exception& e) {
    if (in_tx_) failed_in_tx_ = true;
    return Error(e, sql.substr(0, 80));
  }
}

Status PgConnection::Error(const std::exception& error, std::string_view what) {
  const std::string detail = OneLine(ScrubPassword(error.what(), password_));
  const std::string context = std::string(what) + ": " + detail;
  if (dynamic_cast<const pqxx::in_doubt_error*>(&error)) {
    broken_ = true;
    return Unavailable(name_ + ": the outcome of a commit is unknown (" + detail + "); check, then retry");
  }
  if (dynamic_cast<const pqxx::broken_connection*>(&error)) {
    broken_ = true;
    return Unavailable("PostgreSQL at " + name_ + " is unreachable (" + detail +
                       "): check that the server runs and accepts connections, then retry");
  }
  const auto* sql_error = dynamic_cast<const pqxx::sql_error*>(&error);
  if (!sql_error) return Internal(name_ + ": " + context);
  const std::string state = sql_error->sqlstate();
  const std::string klass = state.substr(0, 2);
  if (state == "40001" || state == "40P01") {
    return Unavailable(name_ + ": conflicted with another writer (" + context + "); retry");
  }
  if (state == "55P03" || state == "57014") {
    return Unavailable(name_ + " is locked by another writer (" + detail + "); retry when it finishes");
  }
  if (klass == "08" || state == "57P01" || state == "57P02" || state == "57P03") {
    broken_ = true;
    return Unavailable("PostgreSQL at " + name_ + " is unreachable (" + detail + "); retry when it is back");
  }
  if (state == "25006") {
    return PermissionDenied(name_ + " was opened read-only, so nothing can be stored; open it read-write to write");
  }
  if (klass == "28" || state == "42501") {
    return PermissionDenied(name_ + ": " + detail + ": check the user and its grants in the URL");
  }
  if (state == "3D000") return NotFound(name_ + ": " + detail + ": create the database first (createdb)");
  if (klass == "53") {
    return Status(ErrorCode::kResourceExhausted, name_ + ": the server is out of resources (" + detail + ")");
  }
  if (klass == "23") return InvalidArgument(name_ + ": " + context);
  return Internal(name_ + ": " + context);
}

Result<bool> PgStatement::Step() {
  if (result_) {
    if (++row_ < static_cast<size_t>(result_->size())) return true;
    result_.reset();  // done: the next Step() runs it again, as SQLite's auto-reset does
    return false;
  }
  EC_ASSIGN_OR_RETURN(pqxx::result rows, connection_->Execute(sql_, params_));
  if (rows.empty()) return false;
  result_ = std::move(rows);
  row_ = 0;
  return true;
}

}  // namespace

bool IsPostgresUrl(std::string_view location) {
  return location.starts_with("postgresql://") || location.starts_with("postgres://");
}

std::string RedactUrl(std::string_view url) {
  std::string out(url);
  const auto spans = PasswordSpans(url);
  for (auto it = spans.rbegin(); it != spans.rend(); ++it) out.replace(it->first, it->second, "***");  // back to front
  return out;
}

Result<Db> OpenPostgres(const std::string& url, bool read_only, int busy_timeout_ms) {
  std::string full = url;
  // A server that does not answer fails the connection in seconds, not at the TCP timeout.
  if (full.find("connect_timeout=") == std::string::npos) {
    full += (full.find('?') == std::string::npos ? "?" : "&") + std::string("connect_timeout=5");
  }
  auto connection = std::make_unique<PgConnection>(full, RedactUrl(url), read_only, busy_timeout_ms);
  EC_RETURN_IF_ERROR(connection->Connect());
  return Db(std::move(connection));
}

Result<Db> LockPostgresStore(const std::string& url, const std::string& name) {
  EC_ASSIGN_OR_RETURN(Db db, OpenPostgres(url, false, 5000));
  EC_ASSIGN_OR_RETURN(Statement lock,
                      db.Prepare("SELECT pg_try_advisory_lock(hashtext(current_schema() || ':' || CAST(? AS TEXT)))"));
  EC_ASSIGN_OR_RETURN(bool row, lock.Bind(1, name).Step());
  if (!row || lock.Int(0) == 0) {
    return FailedPrecondition("another edgecost " + name + " (or `edgecost jobs`) serves " + db.path() +
                              " (a session holds its lock); stop it, or give this one another store");
  }
  return db;
}

}  // namespace edgecost::costdb
