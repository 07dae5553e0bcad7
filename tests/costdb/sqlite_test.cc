#include "costdb/sqlite.h"

#include <cstdint>
#include <limits>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/costdb/test_support.h"

namespace edgecost::costdb {
namespace {

using ::testing::HasSubstr;

class SqliteTest : public test_support::TempDirTest {
 protected:
  void SetUp() override {
    test_support::TempDirTest::SetUp();
    auto db = Db::Open(path_, Db::Access::kReadWrite, 1000);
    ASSERT_TRUE(db.ok()) << db.status().message();
    db_ = std::move(*db);
    ASSERT_TRUE(db_.Exec("CREATE TABLE t (i INTEGER, r REAL, s TEXT, b BLOB)").ok());
  }
  int64_t Rows() { return *db_.QueryInt("SELECT count(*) FROM t"); }
  Status Insert(int64_t i) {
    EC_ASSIGN_OR_RETURN(Statement stmt, db_.Prepare("INSERT INTO t (i) VALUES (?)"));
    return stmt.Bind(1, i).Run();
  }

  Db db_;
};

TEST_F(SqliteTest, TypedBindAndColumnsRoundTrip) {
  auto insert = db_.Prepare("INSERT INTO t (i, r, s, b) VALUES (?, ?, ?, ?)");
  ASSERT_TRUE(insert.ok());
  const std::string blob("a\0b", 3);
  ASSERT_TRUE(insert->Bind(1, uint32_t{7}).Bind(2, 2.5).Bind(3, "text").BindBlob(4, blob).Run().ok());
  ASSERT_TRUE(insert->Bind(1, std::optional<int64_t>()).Bind(2, std::optional<double>(1.0)).Run().ok());
  auto select = db_.Prepare("SELECT i, r, s, b FROM t ORDER BY rowid");
  ASSERT_TRUE(select.ok());
  ASSERT_TRUE(*select->Step());
  EXPECT_EQ(select->Int(0), 7);
  EXPECT_DOUBLE_EQ(select->Double(1), 2.5);
  EXPECT_EQ(select->Text(2), "text");
  EXPECT_EQ(select->Blob(3), blob);
  ASSERT_TRUE(*select->Step());
  EXPECT_TRUE(select->IsNull(0));
  EXPECT_EQ(select->OptionalDouble(1), 1.0);
  EXPECT_EQ(select->OptionalDouble(3), std::nullopt);
  EXPECT_FALSE(*select->Step());
}

TEST_F(SqliteTest, BindErrorsAreReportedNotSwallowed) {
  auto insert = db_.Prepare("INSERT INTO t (i) VALUES (?)");
  ASSERT_TRUE(insert.ok());
  const Status too_big = insert->Bind(1, std::numeric_limits<uint64_t>::max()).Run();
  EXPECT_EQ(too_big.code(), ErrorCode::kInternal);
  EXPECT_THAT(too_big.message(), HasSubstr("binding a parameter"));
  EXPECT_FALSE(insert->Bind(2, int64_t{1}).Run().ok());  // no parameter 2
  EXPECT_TRUE(insert->Bind(1, int64_t{1}).Run().ok());   // Run() cleared the error
  EXPECT_EQ(Rows(), 1);
}

TEST_F(SqliteTest, ErrorsNameTheDatabaseAndTheStatement) {
  const auto bad = db_.Prepare("SELEC nonsense");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), ErrorCode::kInternal);
  EXPECT_THAT(bad.status().message(), HasSubstr(path_));
  EXPECT_THAT(bad.status().message(), HasSubstr("SELEC nonsense"));
}

TEST_F(SqliteTest, TransactionRollsBackUnlessCommitted) {
  {
    auto tx = Transaction::Begin(db_, Transaction::Kind::kWrite);
    ASSERT_TRUE(tx.ok());
    ASSERT_TRUE(Insert(1).ok());
  }
  EXPECT_EQ(Rows(), 0);
  EXPECT_FALSE(db_.InTransaction());
  {
    auto tx = Transaction::Begin(db_, Transaction::Kind::kWrite);
    ASSERT_TRUE(tx.ok());
    ASSERT_TRUE(Insert(1).ok());
    ASSERT_TRUE(tx->Commit().ok());
  }
  EXPECT_EQ(Rows(), 1);
}

TEST_F(SqliteTest, NestedTransactionJoinsTheOuterOne) {
  {
    auto outer = Transaction::Begin(db_, Transaction::Kind::kWrite);
    ASSERT_TRUE(outer.ok());
    {
      auto inner = Transaction::Begin(db_, Transaction::Kind::kWrite);
      ASSERT_TRUE(inner.ok());
      ASSERT_TRUE(Insert(1).ok());
      ASSERT_TRUE(inner->Commit().ok());  // leaves the outer transaction in charge
    }
    EXPECT_TRUE(db_.InTransaction());
  }  // the outer one rolls back, inner work included
  EXPECT_EQ(Rows(), 0);
}

TEST_F(SqliteTest, WriteCannotJoinARead) {
  auto read = Transaction::Begin(db_, Transaction::Kind::kRead);
  ASSERT_TRUE(read.ok());
  const auto write = Transaction::Begin(db_, Transaction::Kind::kWrite);
  ASSERT_FALSE(write.ok());
  EXPECT_EQ(write.status().code(), ErrorCode::kInternal);
}

TEST_F(SqliteTest, ReadsTheFileHeaderThroughSqlite) {
  ASSERT_TRUE(Insert(1).ok());
  auto header = db_.ReadFileHeader(16);
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(*header, std::string("SQLite format 3\0", 16));
}

}  // namespace
}  // namespace edgecost::costdb
