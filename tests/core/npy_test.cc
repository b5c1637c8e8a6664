#include "kforge/core/npy.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

namespace kforge {
namespace {

TEST(NpyTest, HeaderIsAPaddedPythonDict) {
  const int64_t shape2[] = {3, 4};
  std::string h = NpyHeader("<f4", shape2);
  ASSERT_EQ(h.size() % 64, 0u);
  EXPECT_EQ(h.substr(0, 6), "\x93NUMPY");
  EXPECT_EQ(h[6], '\x01');
  EXPECT_EQ(h[7], '\x00');
  const size_t len = static_cast<unsigned char>(h[8]) | (static_cast<unsigned char>(h[9]) << 8);
  EXPECT_EQ(len + 10, h.size());
  EXPECT_EQ(h.back(), '\n');
  EXPECT_NE(h.find("{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }"),
            std::string::npos);
  // Python's tuple spelling: (n,) for one dimension, () for none.
  const int64_t shape1[] = {7};
  EXPECT_NE(NpyHeader("|u1", shape1).find("'shape': (7,)"), std::string::npos);
  EXPECT_NE(NpyHeader("<f8", {}).find("'shape': ()"), std::string::npos);
}

TEST(NpyTest, FileIsHeaderThenTheRawElements) {
  const auto path = std::filesystem::temp_directory_path() / "kforge_npy_test.npy";
  const float data[] = {1.5f, -2.0f, 3.25f};
  const int64_t shape[] = {3};
  ASSERT_TRUE(WriteNpy(path, "<f4", shape, data, sizeof(data)).ok());
  std::ifstream in(path, std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string header = NpyHeader("<f4", shape);
  ASSERT_EQ(all.size(), header.size() + sizeof(data));
  EXPECT_EQ(all.substr(0, header.size()), header);
  float back[3];
  std::memcpy(back, all.data() + header.size(), sizeof(back));
  EXPECT_EQ(back[0], 1.5f);
  EXPECT_EQ(back[2], 3.25f);
  std::filesystem::remove(path);
  EXPECT_FALSE(WriteNpy("/nonexistent-dir/x.npy", "<f4", shape, data, sizeof(data)).ok());
}

}  // namespace
}  // namespace kforge
