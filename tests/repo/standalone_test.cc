// The repository stands alone: a user's clone has nothing beside it, so no
// file in it may point outside it. Tests run from the source root.
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace {

namespace fs = std::filesystem;

// Build trees, git's own files and fuzz corpora are not the repository's text.
bool Skipped(const fs::path& path) {
  const std::string name = path.filename().string();
  return name.starts_with(".") || name.starts_with("build") || name == "subprojects";
}

TEST(Repository, NoFileRefersToWhatIsBesideTheCheckout) {
  const std::string outside = std::string("..") + "/shared";  // spelled apart, so this file does not match itself
  std::vector<std::string> offenders;
  size_t files = 0;
  for (auto it = fs::recursive_directory_iterator("."); it != fs::recursive_directory_iterator(); ++it) {
    if (Skipped(it->path())) {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file()) continue;
    ++files;
    std::ifstream in(it->path(), std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    if (text.str().find(outside) != std::string::npos) offenders.push_back(it->path().string());
  }
  EXPECT_GT(files, 100u) << "run from the source root";
  EXPECT_TRUE(offenders.empty()) << "refer to " << outside << ": " << ::testing::PrintToString(offenders);
}

TEST(Repository, TheDocsAndDataItNamesAreInside) {
  for (const char* path : {"README.md", "LICENSE", "docs/ARCHITECTURE.md", "tests/data/poet-instances/README.md",
                           "tests/data/poet-instances/resnet18_cifar.a72.json"}) {
    EXPECT_TRUE(fs::is_regular_file(path)) << path;
  }
}

}  // namespace
