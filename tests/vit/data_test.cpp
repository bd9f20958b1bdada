// Image datasets: IDX (plain and gzip) and CIFAR files generated here, their corruptions, and
// the real Fashion-MNIST that setup fetched.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>
#include <zlib.h>

#include <fstream>

#include "tests/support/errors.h"
#include "vit/data/cifar.h"
#include "vit/data/idx.h"

namespace colossal::vit {
namespace {

std::string temp(const std::string& name) { return ::testing::TempDir() + name + "_" + std::to_string(::getpid()); }

std::string idx_bytes(unsigned char type, const std::vector<uint32_t>& dims, const std::string& data) {
  std::string s = {0, 0, static_cast<char>(type), static_cast<char>(dims.size())};
  for (uint32_t d : dims) s += {static_cast<char>(d >> 24), static_cast<char>(d >> 16), static_cast<char>(d >> 8),
                                static_cast<char>(d)};
  return s + data;
}

void write(const std::string& path, const std::string& bytes, bool gzip = false) {
  if (!gzip) {
    std::ofstream(path, std::ios::binary) << bytes;
    return;
  }
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(f);
}

TEST(ImageData, IdxPlainAndGzip) {
  std::string pixels;
  for (int i = 0; i < 2 * 3 * 4; ++i) pixels += static_cast<char>(i * 10);
  for (bool gz : {false, true}) {
    auto img = temp(gz ? "img.gz" : "img"), lab = temp(gz ? "lab.gz" : "lab");
    write(img, idx_bytes(0x08, {2, 3, 4}, pixels), gz);
    write(lab, idx_bytes(0x08, {2}, std::string{7, 3}), gz);
    auto d = read_idx_pair(img, lab);
    EXPECT_EQ(d.images.sizes(), (std::vector<int64_t>{2, 3, 4}));
    EXPECT_EQ(d.images[1][2][3].item<int>(), 230);
    EXPECT_EQ(d.labels[0].item<int64_t>(), 7);
    EXPECT_EQ(d.labels[1].item<int64_t>(), 3);
  }
  // Big-endian multi-byte elements.
  auto ints = temp("ints");
  write(ints, idx_bytes(0x0C, {2}, std::string{0, 0, 1, 2, 0x7f, 0, 0, 1}));
  auto t = read_idx(ints);
  EXPECT_EQ(t[0].item<int>(), 258);
  EXPECT_EQ(t[1].item<int>(), 0x7f000001);
}

TEST(ImageData, IdxErrorsNameTheFileAndTheProblem) {
  auto p = temp("bad");
  write(p, std::string{1, 0, 8, 1, 0, 0, 0, 1, 5});
  auto msg = testing::error_message_of([&] { read_idx(p); });
  EXPECT_NE(msg.find("'" + p + "': not an IDX file"), std::string::npos) << msg;
  write(p, idx_bytes(0x08, {2, 2, 2}, "abc"));  // 8 bytes announced, 3 present
  msg = testing::error_message_of([&] { read_idx(p); });
  EXPECT_NE(msg.find("truncated while reading the data (3 of 8 bytes)"), std::string::npos) << msg;
  write(p, idx_bytes(0x08, {2}, "abc"));
  msg = testing::error_message_of([&] { read_idx(p); });
  EXPECT_NE(msg.find("bytes after the 2 elements"), std::string::npos) << msg;
  write(p, idx_bytes(0x07, {1}, "a"));
  msg = testing::error_message_of([&] { read_idx(p); });
  EXPECT_NE(msg.find("unknown element type 0x7"), std::string::npos) << msg;
  auto img = temp("img3"), lab = temp("lab2");
  write(img, idx_bytes(0x08, {3, 1, 1}, "abc"));
  write(lab, idx_bytes(0x08, {2}, "ab"));
  msg = testing::error_message_of([&] { read_idx_pair(img, lab); });
  EXPECT_NE(msg.find("has 3 images but '" + lab + "' has 2 labels"), std::string::npos) << msg;
  msg = testing::error_message_of([&] { read_idx(temp("missing")); });
  EXPECT_NE(msg.find("cannot open"), std::string::npos) << msg;
}

TEST(ImageData, CifarRecordsAndCorruption) {
  const int record = 1 + 3072;
  std::string bytes(2 * record, '\0');
  bytes[0] = 4;
  bytes[1] = 9;                          // red plane, first pixel of image 0
  bytes[record] = 9;
  bytes[record + 1 + 1024] = 7;          // green plane, first pixel of image 1
  auto p = temp("cifar");
  write(p, bytes);
  auto d = read_cifar({p, p});  // two files concatenated
  EXPECT_EQ(d.images.sizes(), (std::vector<int64_t>{4, 3, 32, 32}));
  EXPECT_EQ(d.labels[0].item<int64_t>(), 4);
  EXPECT_EQ(d.labels[1].item<int64_t>(), 9);
  EXPECT_EQ(d.images[0][0][0][0].item<int>(), 9);
  EXPECT_EQ(d.images[1][1][0][0].item<int>(), 7);
  write(p, bytes.substr(0, record + 5));
  auto msg = testing::error_message_of([&] { read_cifar({p}); });
  EXPECT_NE(msg.find("is not a whole number of 3073-byte CIFAR-10 records"), std::string::npos) << msg;
  bytes[record] = 12;
  write(p, bytes);
  msg = testing::error_message_of([&] { read_cifar({p}); });
  EXPECT_NE(msg.find("record 1 has label 12, outside [0, 10)"), std::string::npos) << msg;
}

TEST(ImageData, FashionMnistFromDebian) {
  auto train = fashion_mnist("train");
  auto test = fashion_mnist("test");
  EXPECT_EQ(train.images.sizes(), (std::vector<int64_t>{60000, 28, 28}));
  EXPECT_EQ(test.images.sizes(), (std::vector<int64_t>{10000, 28, 28}));
  EXPECT_EQ(train.labels.min().item<int64_t>(), 0);
  EXPECT_EQ(train.labels.max().item<int64_t>(), 9);
  // Balanced: 6,000 of each class in training, 1,000 in test.
  EXPECT_TRUE(torch::all(torch::bincount(train.labels) == 6000).item<bool>());
  EXPECT_TRUE(torch::all(torch::bincount(test.labels) == 1000).item<bool>());
}

}  // namespace
}  // namespace colossal::vit
