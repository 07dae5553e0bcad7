// A user's data sets (train/data.h): .npz archives stored and deflated, .npy pairs, image folders
// of PNG and JPEG (tests/train/make_data.py writes them with NumPy and PIL); labels in
// ImageFolder's order, pixels where they belong, per-channel normalization; clear refusals of
// mismatched shapes and labels; damaged files give errors and never crash; every epoch is a new
// seeded permutation of the training records, the same on every run; the held-out split is
// disjoint from them and spread over the data.
#include "train/data.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>
#include <set>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "service/onnx_weights.h"
#include "tests/shell.h"
#include "tests/temp_dir.h"
#include "train/images.h"
#include "train/numpy_files.h"

namespace edgecost::train {
namespace {

using ::testing::HasSubstr;

const ModelInput kRgb2x2{{4, 3, 2, 2}, 3};

class DataTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    const testing::CommandResult made = testing::RunShell("/usr/bin/python3 tests/train/make_data.py " + dir_.string());
    if (made.exit_code == 3 || made.exit_code == 127) GTEST_SKIP() << "no NumPy or PIL: " << made.output;
    ASSERT_EQ(made.exit_code, 0) << made.output;
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  std::string Bytes(const std::string& name) const {
    std::ifstream in(Path(name), std::ios::binary);
    std::ostringstream out;
    out << in.rdbuf();
    return out.str();
  }
  std::unique_ptr<Records> Open(const std::string& name, const DataOptions& options = {},
                                const ModelInput& model = kRgb2x2) {
    auto records = OpenRecords(Path(name), options, model);
    EXPECT_TRUE(records.ok()) << records.status().message();
    return records.ok() ? std::move(*records) : nullptr;
  }
  std::string Refusal(const std::string& name, const DataOptions& options = {}, const ModelInput& model = kRgb2x2) {
    auto records = OpenRecords(Path(name), options, model);
    EXPECT_FALSE(records.ok()) << name << " opened";
    return records.ok() ? "" : records.status().message();
  }
  static std::vector<float> Row(const Records& records, int64_t index, int32_t* label) {
    std::vector<float> row(12);
    auto read = records.Read(index, row.data());
    EXPECT_TRUE(read.ok()) << read.status().message();
    *label = read.ok() ? *read : -1;
    return row;
  }
};

TEST_F(DataTest, NpzStoredAndDeflatedAndNpyPairs) {
  int32_t label = 0;
  auto stored = Open("set.npz");
  ASSERT_TRUE(stored);
  EXPECT_EQ(stored->size(), 23);
  EXPECT_EQ(Row(*stored, 5, &label), std::vector<float>(12, 5.0f));
  EXPECT_EQ(label, 2);

  auto deflated = Open("packed.npz", {.input_key = "inputs", .label_key = "labels"});
  ASSERT_TRUE(deflated);
  const std::vector<float> row = Row(*deflated, 4, &label);
  EXPECT_EQ(label, 1);
  for (int c = 0; c < 3; ++c) EXPECT_FLOAT_EQ(row[c * 4 + 3], (40.0f + c) / 255.0f) << "uint8 is x / 255";

  for (const std::string& path : {std::string("x.npy"), "x.npy," + Path("y.npy")}) {
    auto pair = Open(path);
    ASSERT_TRUE(pair);
    EXPECT_EQ(Row(*pair, 1, &label), std::vector<float>(12, 1.0f)) << "float64 converted";
    EXPECT_EQ(label, 1);
  }
}

TEST_F(DataTest, RefusesWhatDoesNotFitTheModelClearly) {
  EXPECT_THAT(Refusal("set.npz", {}, {{4, 1, 2, 2}, 3}), HasSubstr("the model takes N x 1x2x2"));
  EXPECT_THAT(Refusal("set.npz", {}, {{4, 3, 2, 2}, 2}), HasSubstr("has label 2"));
  EXPECT_THAT(Refusal("set.npz", {.input_key = "inputs"}), HasSubstr("has no array 'inputs' (it has: x, y)"));
  EXPECT_THAT(Refusal("train_x.npy"), HasSubstr("is 2.5"));
  EXPECT_THAT(Refusal("fortran_x.npy," + Path("y.npy")), HasSubstr("Fortran order"));
  EXPECT_THAT(Refusal("set.npz", {.mean = {0.1f, 0.2f}}), HasSubstr("--mean has 2 values"));
  EXPECT_THAT(Refusal("nothing.npz"), HasSubstr("does not exist"));
  for (const float bad : {std::nanf(""), 1e30f, -1.0f}) {
    auto npz = service::NpzBytes({{"x", {1, 3, 2, 2}, std::vector<float>(12)}, {"y", {1}, {bad}}});
    ASSERT_TRUE(npz.ok());
    std::ofstream(Path("bad_label.npz"), std::ios::binary) << *npz;
    EXPECT_THAT(Refusal("bad_label.npz"), HasSubstr("has label")) << bad;
  }
  std::ofstream(Path("data.csv")) << "1,2\n";
  EXPECT_THAT(Refusal("data.csv"), HasSubstr("which format"));
  EXPECT_THAT(Refusal("images", {}, {{4, 3, 2, 2}, 2}), HasSubstr("3 class folders"));
  auto few = DataSource::Open({.path = Path("x.npy")}, {{8, 3, 2, 2}, 6});
  ASSERT_FALSE(few.ok());
  EXPECT_THAT(few.status().message(), HasSubstr("fewer than one batch of 8"));
}

// Every byte of a valid file changed, and every length cut: an error or a valid read, never a crash.
TEST_F(DataTest, DamagedArchivesAndArraysGiveErrors) {
  for (const std::string name : {"set.npz", "packed.npz"}) {
    const std::string good = Bytes(name);
    std::mt19937 rng(1);
    for (size_t i = 0; i < good.size(); i += 3) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ (1 + rng() % 255));
      auto members = ReadZip(bad, name);
      if (members.ok()) {
        for (const auto& [member, bytes] : *members) (void)ParseNpy(bytes, member).ok();
      }
    }
    for (size_t cut = 0; cut < good.size(); cut += 7) EXPECT_FALSE(ReadZip(good.substr(0, cut), name).ok()) << cut;
  }
  const std::string npy = Bytes("x.npy");
  for (size_t i = 0; i < 128; ++i) {
    std::string bad = npy;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    (void)ParseNpy(bad, "x.npy").ok();
  }
  for (size_t cut = 0; cut < npy.size(); cut += 5) EXPECT_FALSE(ParseNpy(npy.substr(0, cut), "x.npy").ok());
  std::string huge = npy;
  const size_t shape = huge.find("(6, 3, 2, 2)");
  ASSERT_NE(shape, std::string::npos);
  huge.replace(shape, 12, "(9999999999)");
  EXPECT_THAT(ParseNpy(huge, "x.npy").status().message(), HasSubstr("needs more bytes"));
  EXPECT_THAT(ParseNpy(std::string("\x93NUMPY\x01\x00\xff\xff{}", 12), "h.npy").status().message(),
              HasSubstr("truncated"));
  // A member that says it unpacks to more than the limit is refused before anything is allocated.
  EXPECT_THAT(ReadZip(Bytes("set.npz"), "set.npz", 16).status().message(), HasSubstr("more than the 16 B"));
}

TEST_F(DataTest, DamagedImagesGiveErrors) {
  for (const std::string name : {"images/a_cat/1_rgb.png", "images/b_dog/photo.jpg"}) {
    const std::string good = Bytes(name);
    for (size_t i = 0; i < good.size(); i += 2) {
      std::string bad = good;
      bad[i] = static_cast<char>(bad[i] ^ 0xa5);
      (void)DecodeImage(bad, 3, name).ok();
    }
    for (size_t cut = 0; cut + 1 < good.size(); cut += 9) (void)DecodeImage(good.substr(0, cut), 1, name).ok();
    EXPECT_FALSE(DecodeImage(good.substr(0, good.size() / 2), 3, name).ok()) << name;
  }
  EXPECT_THAT(DecodeImage("GIF89a....", 3, "x.gif").status().message(), HasSubstr("neither a PNG nor a JPEG"));
}

TEST_F(DataTest, ImageFolderInImageFoldersOrderWithPixelsWhereTheyBelong) {
  auto folder = Open("images");
  ASSERT_TRUE(folder);
  ASSERT_EQ(folder->size(), 5) << "4 images and notes.txt, which is skipped";
  int32_t label = 0;
  // a_cat/1_rgb.png: red, green / blue, (10, 20, 30), planar.
  const std::vector<float> rgb = Row(*folder, 0, &label);
  EXPECT_EQ(label, 0) << "a_cat sorts first";
  const float expected[12] = {1, 0, 0, 10 / 255.0f, 0, 1, 0, 20 / 255.0f, 0, 0, 1, 30 / 255.0f};
  for (int i = 0; i < 12; ++i) EXPECT_FLOAT_EQ(rgb[i], expected[i]) << i;
  EXPECT_FLOAT_EQ(Row(*folder, 1, &label)[0], 200 / 255.0f) << "RGBA's red";
  EXPECT_EQ(label, 0);
  EXPECT_EQ(Row(*folder, 2, &label), std::vector<float>(12, 77 / 255.0f)) << "grayscale to RGB";
  EXPECT_EQ(label, 1);
  const std::vector<float> jpeg = Row(*folder, 3, &label);
  EXPECT_EQ(label, 1);
  EXPECT_NEAR(jpeg[0] * 255, 40, 3);
  EXPECT_NEAR(jpeg[4] * 255, 120, 3);
  EXPECT_NEAR(jpeg[8] * 255, 200, 3);
  // c_owl/deeper/big.png: 4x4 of 10 (4 y + x) to 2x2: each output the mean of its 2x2 block.
  const std::vector<float> resized = Row(*folder, 4, &label);
  EXPECT_EQ(label, 2);
  const float blocks[4] = {25, 45, 105, 125};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(resized[i] * 255, blocks[i], 1e-3) << i;

  auto normalized = Open("images", {.mean = {0.5f}, .std = {0.25f, 0.5f, 1.0f}});
  ASSERT_TRUE(normalized);
  const std::vector<float> row = Row(*normalized, 0, &label);
  EXPECT_FLOAT_EQ(row[0], 2.0f);   // (1 - 0.5) / 0.25
  EXPECT_FLOAT_EQ(row[5], 1.0f);   // (1 - 0.5) / 0.5
  EXPECT_FLOAT_EQ(row[10], 0.5f);  // (1 - 0.5) / 1
  auto gray = Open("images", {}, {{4, 1, 2, 2}, 3});
  ASSERT_TRUE(gray);
  std::vector<float> one(4);
  ASSERT_TRUE(gray->Read(2, one.data()).ok());
  EXPECT_EQ(one, std::vector<float>(4, 77 / 255.0f));
}

// A broken image is left out when the folder opens, and said, instead of failing the run at its step.
TEST_F(DataTest, AnUnreadableImageIsLeftOutAtOpenAndSaid) {
  std::ofstream(Path("images/b_dog/broken.png"), std::ios::binary) << std::string("\x89PNG\r\n\x1a\n", 8) << "cut";
  auto folder = Open("images");
  ASSERT_TRUE(folder);
  EXPECT_EQ(folder->size(), 5) << "the 5 readable images";
  EXPECT_THAT(folder->Describe(), HasSubstr("1 unreadable image left out, e.g. "));
  EXPECT_THAT(folder->Describe(), HasSubstr("broken.png"));
  for (int64_t i = 0; i < folder->size(); ++i) {
    int32_t label = 0;
    Row(*folder, i, &label);
  }
}

std::vector<int64_t> RecordsOf(const Batch& batch) {
  std::vector<int64_t> ids;
  for (size_t r = 0; r < batch.labels.size(); ++r) ids.push_back(static_cast<int64_t>(batch.inputs[r * 12]));
  return ids;
}

TEST_F(DataTest, EveryEpochIsANewSeededPermutation) {
  auto make = [&](uint32_t seed) { return DataSource::Open({.path = Path("set.npz"), .seed = seed}, kRgb2x2); };
  auto data = make(7), same = make(7), other = make(8);
  ASSERT_TRUE(data.ok() && same.ok() && other.ok()) << data.status().message();
  EXPECT_EQ(data->batches_per_epoch(), 5);
  EXPECT_EQ(data->dropped_per_epoch(), 3);
  std::vector<std::vector<int64_t>> epochs;
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::vector<int64_t> seen;
    for (int64_t b = 0; b < 5; ++b) {
      auto batch = data->BatchFor(epoch * 5 + b);
      ASSERT_TRUE(batch.ok()) << batch.status().message();
      for (size_t r = 0; r < batch->labels.size(); ++r) {
        const int64_t id = RecordsOf(*batch)[r];
        EXPECT_EQ(batch->labels[r], id % 3) << "inputs and labels stay together";
      }
      const std::vector<int64_t> ids = RecordsOf(*batch);
      seen.insert(seen.end(), ids.begin(), ids.end());
      auto again = same->BatchFor(epoch * 5 + b);
      ASSERT_TRUE(again.ok());
      EXPECT_EQ(RecordsOf(*again), ids) << "the same seed, the same order";
    }
    EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), 20u) << "no record twice in an epoch";
    std::vector<int64_t> order = data->EpochOrder(epoch);
    std::sort(order.begin(), order.end());
    std::vector<int64_t> all(23);
    std::iota(all.begin(), all.end(), 0);
    EXPECT_EQ(order, all) << "a permutation of every training record";
    epochs.push_back(seen);
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
  EXPECT_NE(data->EpochOrder(0), other->EpochOrder(0)) << "another seed, another order";
}

TEST_F(DataTest, HeldOutRecordsAreSpreadAndNeverTrainedOn) {
  auto data = DataSource::Open({.path = Path("set.npz"), .val_split = 0.2}, {{3, 3, 2, 2}, 3});
  ASSERT_TRUE(data.ok()) << data.status().message();
  EXPECT_EQ(data->held_out_indexes(), (std::vector<int64_t>{4, 9, 14, 19}));
  EXPECT_EQ(data->held_out_records(), 4);
  EXPECT_EQ(data->train_records(), 19);
  const std::set<int64_t> held(data->held_out_indexes().begin(), data->held_out_indexes().end());
  for (int64_t step = 0; step < 3 * data->batches_per_epoch(); ++step) {
    auto batch = data->BatchFor(step);
    ASSERT_TRUE(batch.ok());
    for (int64_t id : RecordsOf(*batch)) EXPECT_FALSE(held.count(id)) << "record " << id << " is held out";
  }
  ASSERT_EQ(data->held_out_batches(), 2);
  int64_t rows = 0;
  auto last = data->HeldOutBatch(1, &rows);
  ASSERT_TRUE(last.ok());
  EXPECT_EQ(rows, 1);
  EXPECT_EQ(RecordsOf(*last), (std::vector<int64_t>{19, 19, 19})) << "padded with its last record";

  auto separate = DataSource::Open({.path = Path("set.npz"), .val_path = Path("x.npy")}, kRgb2x2);
  ASSERT_TRUE(separate.ok()) << separate.status().message();
  EXPECT_EQ(separate->held_out_records(), 6);
  EXPECT_EQ(separate->train_records(), 23);
  EXPECT_FALSE(DataSource::Open({.path = Path("set.npz"), .val_split = 1.0}, kRgb2x2).ok());
}

}  // namespace
}  // namespace edgecost::train
