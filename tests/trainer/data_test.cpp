// Dataset readers (IDX gzip and plain, CIFAR-10 binary), their error messages on missing and
// corrupt files, and the shard sampler (every rank different data, N x b == 1 x N*b).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "test_data.hpp"
#include "trainer/data.hpp"

namespace accord::trainer {
namespace {

using testing::scratch_dir;

std::vector<uint8_t> read_all(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

void expect_error(const Status& s, const std::string& file, const std::string& what) {
  ASSERT_FALSE(s.ok()) << "expected an error about " << file;
  EXPECT_NE(s.message().find(file), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
}

TEST(Idx, GzipAndPlainFilesGiveTheSameData) {
  const std::string gz = scratch_dir("idxgz"), plain = scratch_dir("idxplain");
  testing::write_idx_dataset(gz, 50, 20, true);
  testing::write_idx_dataset(plain, 50, 20, false);
  Dataset a, b, t;
  ASSERT_TRUE(load_dataset("fashion-mnist", gz, true, &a).ok());
  ASSERT_TRUE(load_dataset("mnist", plain, true, &b).ok());
  ASSERT_TRUE(load_dataset("fashion-mnist", gz, false, &t).ok());
  EXPECT_EQ(a.count(), 50u);
  EXPECT_EQ(t.count(), 20u);
  EXPECT_EQ(a.shape.c, 1);
  EXPECT_EQ(a.shape.h, 28);
  EXPECT_EQ(a.labels, b.labels);
  EXPECT_EQ(a.labels[3], (3 * 7) % 10);
  // Same pixels; only the normalisation constants of the two datasets differ.
  const float pa = (testing::synthetic_pixel(3, a.labels[3], 0, 5, 6, 28, 28) / 255.0f - 0.2860f) / 0.3530f;
  EXPECT_NEAR(a.images[3 * 784 + 5 * 28 + 6], pa, 1e-5);
}

TEST(Idx, MissingFileNamesIt) {
  const std::string dir = scratch_dir("idxmissing");
  Dataset d;
  expect_error(load_dataset("fashion-mnist", dir, true, &d), dir + "/train-images-idx3-ubyte", "no such file");
}

TEST(Idx, WrongMagicSaysWhichFileAndWhy) {
  const std::string dir = scratch_dir("idxmagic");
  testing::write_idx_dataset(dir, 10, 10, false);
  // Labels where images should be.
  std::filesystem::copy_file(dir + "/train-labels-idx1-ubyte", dir + "/train-images-idx3-ubyte",
                             std::filesystem::copy_options::overwrite_existing);
  Dataset d;
  expect_error(load_dataset("mnist", dir, true, &d), "train-images-idx3-ubyte", "not an IDX image file");
}

TEST(Idx, TruncatedImagesAreReported) {
  const std::string dir = scratch_dir("idxtrunc");
  testing::write_idx_dataset(dir, 10, 10, false);
  std::vector<uint8_t> img = read_all(dir + "/train-images-idx3-ubyte");
  img.resize(img.size() - 100);
  testing::write_bytes(dir + "/train-images-idx3-ubyte", img, false);
  Dataset d;
  expect_error(load_dataset("mnist", dir, true, &d), "train-images-idx3-ubyte", "truncated");
}

TEST(Idx, CorruptGzipIsReported) {
  const std::string dir = scratch_dir("idxgzbad");
  testing::write_idx_dataset(dir, 30, 10, true);
  std::vector<uint8_t> gz = read_all(dir + "/train-images-idx3-ubyte.gz");
  for (size_t i = 40; i < gz.size() - 20; i += 7) gz[i] ^= 0x5A;  // damage the deflate stream
  testing::write_bytes(dir + "/train-images-idx3-ubyte.gz", gz, false);
  Dataset d;
  const Status s = load_dataset("fashion-mnist", dir, true, &d);
  expect_error(s, "train-images-idx3-ubyte.gz", "corrupt");
}

TEST(Idx, LabelCountMismatchAndBadLabels) {
  const std::string dir = scratch_dir("idxlabels");
  testing::write_idx_dataset(dir, 10, 12, false);
  // Test labels (12) paired with train images (10).
  std::filesystem::copy_file(dir + "/t10k-labels-idx1-ubyte", dir + "/train-labels-idx1-ubyte",
                             std::filesystem::copy_options::overwrite_existing);
  Dataset d;
  expect_error(load_dataset("mnist", dir, true, &d), "train-labels-idx1-ubyte", "12 labels for 10 images");
  std::vector<uint8_t> lab = read_all(dir + "/t10k-labels-idx1-ubyte");
  lab[8 + 4] = 42;
  testing::write_bytes(dir + "/t10k-labels-idx1-ubyte", lab, false);
  expect_error(load_dataset("mnist", dir, false, &d), "t10k-labels-idx1-ubyte", "label 42 of sample 4");
}

TEST(Cifar, ReadsBatchesAndSubfolder) {
  const std::string dir = scratch_dir("cifar");
  std::filesystem::create_directory(dir + "/cifar-10-batches-bin");
  testing::write_cifar_dataset(dir + "/cifar-10-batches-bin", 4, 6);
  Dataset train, test;
  ASSERT_TRUE(load_dataset("cifar10", dir, true, &train).ok());
  ASSERT_TRUE(load_dataset("cifar10", dir, false, &test).ok());
  EXPECT_EQ(train.count(), 20u);
  EXPECT_EQ(test.count(), 6u);
  EXPECT_EQ(train.shape.c, 3);
  EXPECT_EQ(train.shape.h, 32);
  EXPECT_EQ(train.labels[4], (10000 * 2) % 10);  // first record of batch 2
  const float red = (testing::synthetic_pixel(10001, 1, 0, 0, 0, 32, 32) / 255.0f - 0.4914f) / 0.2470f;
  EXPECT_NEAR(train.images[1 * 3072], red, 1e-5);
}

TEST(Cifar, BadSizeAndLabelAreReported) {
  const std::string dir = scratch_dir("cifarbad");
  testing::write_cifar_dataset(dir, 2, 2);
  std::vector<uint8_t> b = read_all(dir + "/test_batch.bin");
  b.pop_back();
  testing::write_bytes(dir + "/test_batch.bin", b, false);
  Dataset d;
  expect_error(load_dataset("cifar10", dir, false, &d), "test_batch.bin", "not a whole number of CIFAR-10 records");
  b = read_all(dir + "/data_batch_3.bin");
  b[3073] = 200;
  testing::write_bytes(dir + "/data_batch_3.bin", b, false);
  expect_error(load_dataset("cifar10", dir, true, &d), "data_batch_3.bin", "record 1 has label 200");
  expect_error(load_dataset("svhn", dir, true, &d), "svhn", "unknown dataset");
}

TEST(Sampler, RanksGetDisjointShardsCoveringTheEpoch) {
  const size_t n = 103;
  const int nranks = 3, batch = 4;
  std::vector<ShardSampler> s;
  for (int r = 0; r < nranks; ++r) s.emplace_back(n, nranks, batch, 7);
  EXPECT_EQ(s[0].steps_per_epoch(), n / 12);
  std::vector<uint32_t> idx;
  for (int epoch = 0; epoch < 2; ++epoch) {
    std::set<uint32_t> seen;
    for (size_t step = 0; step < s[0].steps_per_epoch(); ++step) {
      for (int r = 0; r < nranks; ++r) {
        s[r].indices(epoch, step, r, &idx);
        ASSERT_EQ(idx.size(), static_cast<size_t>(batch));
        for (uint32_t i : idx) {
          EXPECT_LT(i, n);
          EXPECT_TRUE(seen.insert(i).second) << "sample " << i << " twice in epoch " << epoch;
        }
      }
    }
    EXPECT_EQ(seen.size(), s[0].steps_per_epoch() * nranks * batch);
  }
}

TEST(Sampler, NRanksTimesBatchSeeTheSamplesOfOneRankWithNTimesTheBatch) {
  ShardSampler one(500, 1, 16, 3), r0(500, 2, 8, 3), r1(500, 2, 8, 3);
  std::vector<uint32_t> a, b, c;
  for (int epoch = 0; epoch < 2; ++epoch)
    for (size_t step = 0; step < one.steps_per_epoch(); ++step) {
      one.indices(epoch, step, 0, &a);
      r0.indices(epoch, step, 0, &b);
      r1.indices(epoch, step, 1, &c);
      b.insert(b.end(), c.begin(), c.end());
      ASSERT_EQ(a, b) << "epoch " << epoch << " step " << step;
    }
}

TEST(Sampler, ReshufflesPerEpochAndDependsOnlyOnSeedAndEpoch) {
  ShardSampler a(1000, 1, 50, 11), b(1000, 1, 50, 11), c(1000, 1, 50, 12);
  std::vector<uint32_t> x, y, z;
  a.indices(0, 3, 0, &x);
  a.indices(1, 3, 0, &y);
  EXPECT_NE(x, y);
  b.indices(1, 3, 0, &z);  // a fresh sampler straight into epoch 1 (as after a resume)
  EXPECT_EQ(y, z);
  c.indices(1, 3, 0, &z);
  EXPECT_NE(y, z);
}

TEST(RealData, DebianFashionMnistIfInstalled) {
  const std::string dir = "/usr/share/datasets/fashion-mnist";
  if (!std::filesystem::exists(dir + "/t10k-images-idx3-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  Dataset test;
  ASSERT_TRUE(load_dataset("fashion-mnist", dir, false, &test).ok());
  EXPECT_EQ(test.count(), 10000u);
  EXPECT_EQ(test.shape.h, 28);
  double mean = 0;
  for (float v : test.images) mean += v;
  EXPECT_NEAR(mean / test.images.size(), 0.0, 0.05);  // normalised
}

}  // namespace
}  // namespace accord::trainer
