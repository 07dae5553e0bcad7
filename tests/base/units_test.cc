#include "base/units.h"

#include <gtest/gtest.h>

namespace edgecost {
namespace {

TEST(ParseBytes, AcceptsPlainSiAndBinaryUnits) {
  EXPECT_EQ(*ParseBytes("3000000B"), 3000000);
  EXPECT_EQ(*ParseBytes("3MB"), 3000000);
  EXPECT_EQ(*ParseBytes("2.5MiB"), 2621440);
  EXPECT_EQ(*ParseBytes("512 KiB"), 524288);
  EXPECT_EQ(*ParseBytes("1.5gb"), 1500000000);
  EXPECT_EQ(*ParseBytes("40B"), 40);
  EXPECT_EQ(*ParseBytes("2TB"), 2000000000000);
  EXPECT_EQ(*ParseBytes("1.5 TiB"), 1649267441664);
}

TEST(ParseBytes, RejectsGarbageWithAHint) {
  for (const char* bad : {"", "MB", "3XB", "-1MB", "1e400"}) {
    const Result<int64_t> r = ParseBytes(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  }
  EXPECT_NE(ParseBytes("3XB").status().message().find("KiB"), std::string::npos);
}

// A size without a unit is refused, as a runtime budget without one is, and the message names the units.
TEST(ParseBytes, RefusesANumberWithoutAUnit) {
  for (const char* bare : {"0.9", "3", "3000000", " 2.5 "}) {
    const Result<int64_t> r = ParseBytes(bare);
    ASSERT_FALSE(r.ok()) << bare;
    EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("no unit"), std::string::npos) << r.status().message();
    for (const char* unit : {"MB", "GB", "MiB", "B"}) {
      EXPECT_NE(r.status().message().find(unit), std::string::npos) << r.status().message();
    }
  }
  EXPECT_NE(ParseBytes("0.9").status().message().find("0.9MB"), std::string::npos);
}

TEST(ParseRuntimeBudget, MultiplesAndSeconds) {
  const RuntimeBudget x = *ParseRuntimeBudget("7.6x");
  EXPECT_EQ(x.kind, RuntimeBudget::Kind::kMultiple);
  EXPECT_DOUBLE_EQ(x.Seconds(2.0), 15.2);
  const RuntimeBudget s = *ParseRuntimeBudget("1.2s");
  EXPECT_EQ(s.kind, RuntimeBudget::Kind::kSeconds);
  EXPECT_DOUBLE_EQ(s.Seconds(100.0), 1.2);
  EXPECT_DOUBLE_EQ(ParseRuntimeBudget("800ms")->Seconds(1.0), 0.8);
  EXPECT_FALSE(ParseRuntimeBudget("2h").ok());
  // A bare number is not silently a multiple, and a multiple under 1x says why it cannot be.
  EXPECT_NE(ParseRuntimeBudget("2").status().message().find("2x"), std::string::npos);
  EXPECT_NE(ParseRuntimeBudget("0x").status().message().find("at least 1x"), std::string::npos);
  EXPECT_NE(ParseRuntimeBudget("0.5x").status().message().find("at least 1x"), std::string::npos);
  EXPECT_FALSE(ParseRuntimeBudget("0s").ok());
  EXPECT_FALSE(ParseRuntimeBudget("-1s").ok());
}

TEST(Format, HumanUnits) {
  EXPECT_EQ(FormatBytes(512), "512 B");
  EXPECT_EQ(FormatBytes(3000000), "3.00 MB");
  EXPECT_EQ(FormatSeconds(0.0456), "45.6 ms");
  EXPECT_EQ(FormatSeconds(99.4), "99.4 s");
  EXPECT_EQ(FormatSeconds(139), "2 min 19 s");
  EXPECT_EQ(FormatSeconds(14563), "4 h 03 min");  // vgg16's step on the m4 preset, once "14563 s"
  EXPECT_EQ(FormatSeconds(2 * 86400 + 5 * 3600), "2 d 5 h");
  EXPECT_EQ(FormatJoules(7.889510), "7.89 J");
  EXPECT_EQ(FormatJoules(0), "0 J");
}

}  // namespace
}  // namespace edgecost
