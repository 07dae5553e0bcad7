#include "graph/resolve.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace edgecost::graph {
namespace {

TEST(Resolve, WhatIsAFileIsDecidedByTheNameAlone) {
  EXPECT_TRUE(IsGraphFile("g.json"));
  EXPECT_TRUE(IsGraphFile("./g"));
  EXPECT_FALSE(IsGraphFile("m.onnx"));
  EXPECT_TRUE(IsOnnxModel("m.onnx"));
  // A file named like a model in the working directory does not make the model a file.
  const std::string name = "edgecost_resolve_test_" + std::to_string(::getpid());
  std::ofstream(name) << "{}";
  EXPECT_FALSE(IsGraphFile(name));
  std::filesystem::remove(name);
  // No file system call: a name too long for one is no exception.
  EXPECT_FALSE(IsGraphFile(std::string(5000, 'A')));
}

TEST(Resolve, ModelNamesOverRpcAreNamesOnly) {
  for (const char* good : {"linear", "resnet18_cifar", "my-model.v2", "A1"})
    EXPECT_TRUE(CheckModelName(good).ok()) << good;
  for (const std::string& bad :
       std::vector<std::string>{"", "/etc/shadow", "../x", "x.json", "x.onnx", ".hidden", "-flag", "a b", "tab\t",
                                std::string("nul\0byte", 8), std::string(129, 'a')}) {
    EXPECT_EQ(CheckModelName(bad).code(), ErrorCode::kInvalidArgument) << bad;
  }
  EXPECT_TRUE(CheckModelName(std::string(128, 'a')).ok());
}

}  // namespace
}  // namespace edgecost::graph
