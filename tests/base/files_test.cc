#include "base/files.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/temp_dir.h"

namespace edgecost {
namespace {

using FilesTest = testing::TempDirTest;

std::string Read(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

TEST_F(FilesTest, WritesAndReplacesWholeFilesLeavingNoTemporary) {
  const std::string path = (dir_ / "state.bin").string();
  ASSERT_TRUE(WriteFileAtomically(path, std::string("first\0version", 13)).ok());
  EXPECT_EQ(Read(path), std::string("first\0version", 13));
  ASSERT_TRUE(WriteFileAtomically(path, "second").ok());
  EXPECT_EQ(Read(path), "second");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), std::filesystem::directory_iterator()), 1);
}

TEST_F(FilesTest, AFailedWriteKeepsTheOldFileAndSaysWhy) {
  const std::string path = (dir_ / "kept.bin").string();
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());
  Status missing_dir = WriteFileAtomically((dir_ / "no such dir" / "x.bin").string(), "new");
  EXPECT_FALSE(missing_dir.ok());
  EXPECT_NE(missing_dir.message().find("no such dir"), std::string::npos) << missing_dir.message();
  // A directory where the file should be: the rename fails, the temporary is removed.
  std::filesystem::create_directory(dir_ / "a dir");
  EXPECT_FALSE(WriteFileAtomically((dir_ / "a dir").string(), "new").ok());
  EXPECT_EQ(Read(path), "old");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), std::filesystem::directory_iterator()), 2);
}

TEST_F(FilesTest, RemovesOnlyTheTemporariesOfProcessesThatAreGone) {
  const std::string path = (dir_ / "run.ckpt").string();
  for (const std::string& pid : std::vector<std::string>{"999999999", "1", std::to_string(::getpid())}) {
    std::ofstream(path + ".tmp." + pid) << "partial";
  }
  std::ofstream(path + ".tmp.notapid") << "someone else's";
  EXPECT_EQ(RemoveStaleTemporaries(path), 1);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp.999999999"));
  EXPECT_TRUE(std::filesystem::exists(path + ".tmp.1"));  // init runs
  EXPECT_TRUE(std::filesystem::exists(path + ".tmp." + std::to_string(::getpid())));
  EXPECT_TRUE(std::filesystem::exists(path + ".tmp.notapid"));
}

}  // namespace
}  // namespace edgecost
