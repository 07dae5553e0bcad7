// costdb::Store: nothing opened until asked, one check, a connection per thread.
#include "costdb/store.h"

#include <fstream>
#include <string>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/costdb/test_support.h"

namespace edgecost::costdb {
namespace {

using ::testing::HasSubstr;

class StoreTest : public test_support::TempDirTest {};

TEST_F(StoreTest, NothingIsOpenedOrCreatedUntilAConnectionIsAskedFor) {
  Store read_only(path_, OpenMode::kReadOnly);
  EXPECT_FALSE(std::filesystem::exists(path_));
  const Result<CostDb*> missing = read_only.Db();
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);

  Store read_write(path_, OpenMode::kReadWrite);
  EXPECT_FALSE(std::filesystem::exists(path_));
  ASSERT_TRUE(read_write.Check().ok());
  EXPECT_TRUE(std::filesystem::exists(path_));
  EXPECT_TRUE(read_only.Db().ok()) << "a failed check is tried again";
}

TEST_F(StoreTest, AFileThatIsNotOursIsRefusedByEveryCall) {
  std::ofstream(path_) << "not a database, and more than a header's worth of bytes to be sure of it";
  Store store(path_, OpenMode::kReadWrite);
  const Status checked = store.Check();
  EXPECT_EQ(checked.code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(checked.message(), HasSubstr("not an edgecost database"));
  EXPECT_FALSE(store.Db().ok());
  EXPECT_FALSE(store.OpenConnection().ok());
}

TEST_F(StoreTest, EachThreadHasItsOwnConnectionAndSeesTheOthersWrites) {
  Store store(path_, OpenMode::kReadWrite);
  const Result<CostDb*> mine = store.Db();
  ASSERT_TRUE(mine.ok()) << mine.status().message();
  EXPECT_EQ(*store.Db(), *mine) << "the same thread, the same connection";
  v1::Device device = test_support::MeasuredDevice("pi", "fp1");
  ASSERT_TRUE((*mine)->UpsertDevice(device).ok());

  Result<CostDb*> theirs = InvalidArgument("not run");
  Result<v1::Device> seen = InvalidArgument("not run");
  std::thread([&] {
    theirs = store.Db();
    if (theirs.ok()) seen = (*theirs)->GetDevice("pi");
  }).join();
  ASSERT_TRUE(theirs.ok()) << theirs.status().message();
  EXPECT_NE(*theirs, *mine);
  ASSERT_TRUE(seen.ok()) << seen.status().message();
  EXPECT_EQ(seen->fingerprint().hash(), device.fingerprint().hash());

  Result<CostDb> own = store.OpenConnection();
  ASSERT_TRUE(own.ok()) << own.status().message();
  EXPECT_EQ(own->GetDevice("pi")->name(), "pi");
  EXPECT_EQ(store.printable_path(), path_);
}

}  // namespace
}  // namespace edgecost::costdb
