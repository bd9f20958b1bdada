#include "core/checkpoint/safetensors.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <fstream>

#include "core/checkpoint/atomic_file.h"
#include "core/checkpoint/integrity.h"
#include "tests/support/errors.h"

namespace colossal::checkpoint {
namespace {

std::string temp_dir(const std::string& name) {
  std::string d = ::testing::TempDir() + "st_" + name + "_" + std::to_string(::getpid());
  (void)!std::system(("rm -rf '" + d + "' && mkdir -p '" + d + "'").c_str());
  return d;
}

NamedTensors every_dtype() {
  torch::manual_seed(0);
  NamedTensors t;
  t.emplace_back("f64", torch::randn({3, 5}, torch::kFloat64));
  t.emplace_back("f32", torch::randn({7}));
  t.emplace_back("f16", torch::randn({2, 3, 4}).to(torch::kHalf));
  t.emplace_back("bf16", torch::randn({9}).to(torch::kBFloat16));
  t.emplace_back("i64", torch::randint(-1000000, 1000000, {4}, torch::kInt64));
  t.emplace_back("i32", torch::randint(-1000, 1000, {4, 2}, torch::kInt32));
  t.emplace_back("i16", torch::randint(-300, 300, {5}, torch::kInt16));
  t.emplace_back("i8", torch::randint(-100, 100, {6}, torch::kInt8));
  t.emplace_back("u8", torch::randint(0, 255, {3}, torch::kUInt8));
  t.emplace_back("bool", torch::randint(0, 2, {11}).to(torch::kBool));
  t.emplace_back("scalar", torch::tensor(3.5));
  t.emplace_back("empty", torch::zeros({0, 4}));
  t.emplace_back("strided", torch::arange(12, torch::kFloat32).reshape({3, 4}).t());
  return t;
}

void expect_same(const NamedTensors& want, const std::function<at::Tensor(const std::string&)>& get) {
  for (const auto& [name, t] : want) {
    auto got = get(name);
    EXPECT_EQ(got.scalar_type(), t.scalar_type()) << name;
    EXPECT_EQ(got.sizes(), t.sizes()) << name;
    EXPECT_TRUE(torch::equal(got, t.contiguous())) << name;
  }
}

TEST(Safetensors, EveryDtypeRoundTrips) {
  auto dir = temp_dir("dtypes");
  auto tensors = every_dtype();
  save_safetensors(dir + "/all.safetensors", tensors, {{"format", "pt"}});
  auto f = SafetensorsFile::open(dir + "/all.safetensors");
  EXPECT_EQ(f->metadata().at("format"), "pt");
  EXPECT_EQ(f->tensors().size(), tensors.size());
  expect_same(tensors, [&](const std::string& n) { return f->view(n); });
  // A view is copy-on-write: changing it leaves the file alone.
  auto v = f->view("f32");
  v.fill_(0);
  auto again = SafetensorsFile::open(dir + "/all.safetensors");
  EXPECT_TRUE(torch::equal(again->view("f32"), tensors[1].second));
}

TEST(Safetensors, ShardedSaveEqualsSingleFile) {
  auto dir = temp_dir("sharded");
  NamedTensors tensors;
  for (int i = 0; i < 10; ++i) tensors.emplace_back("layer." + std::to_string(i), torch::randn({64, 8}));
  auto files = save_sharded(dir + "/sharded", tensors, {.max_shard_bytes = 3 * 64 * 8 * 4});
  ASSERT_EQ(files.size(), 5u);  // 4 shards of up to 3 tensors + the index
  EXPECT_EQ(files[0], "model-00001-of-00004.safetensors");
  EXPECT_EQ(files.back(), "model.safetensors.index.json");
  auto single = save_sharded(dir + "/single", tensors);
  ASSERT_EQ(single, std::vector<std::string>{"model.safetensors"});
  CheckpointReader a(dir + "/sharded"), b(dir + "/single");
  EXPECT_EQ(a.names(), b.names());
  for (const auto& n : a.names()) EXPECT_TRUE(torch::equal(a.load(n), b.load(n))) << n;
}

// Files written here load in Hugging Face's safetensors, and the other way round.
TEST(Safetensors, InteroperatesWithHuggingFaceSafetensors) {
  if (std::string(COLOSSAL_TEST_PYTHON).empty()) {
    GTEST_SKIP() << "configured without COLOSSAL_PYTHON (scripts/build.sh sets it): no Python "
                    "safetensors to compare with";
  }
  auto dir = temp_dir("hf");
  auto tensors = every_dtype();
  tensors.pop_back();  // safetensors.torch rejects non-contiguous inputs only on its own side
  save_safetensors(dir + "/ours.safetensors", tensors);
  std::string script = dir + "/check.py";
  std::ofstream(script) << R"PY(
import sys, torch
from safetensors.torch import load_file, save_file
d = sys.argv[1]
ours = load_file(d + "/ours.safetensors")
with open(d + "/ours.txt", "w") as f:
    for k in sorted(ours):
        t = ours[k]
        f.write(f"{k} {str(t.dtype)} {list(t.shape)} {float(t.double().sum())}\n")
torch.manual_seed(0)
save_file({"w": torch.arange(6, dtype=torch.bfloat16).reshape(2, 3), "b": torch.tensor([True, False]),
           "x": torch.linspace(0, 1, 5, dtype=torch.float64)}, d + "/theirs.safetensors",
          metadata={"format": "pt"})
)PY";
  std::string cmd = std::string(COLOSSAL_TEST_PYTHON) + " " + script + " " + dir + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "python side failed: " << cmd;
  std::ifstream summary(dir + "/ours.txt");
  std::string line;
  int lines = 0;
  while (std::getline(summary, line)) {
    std::istringstream ss(line);
    std::string name;
    ss >> name;
    for (const auto& [n, t] : tensors) {
      if (n != name) continue;
      double sum = 0;
      auto pos = line.rfind(' ');
      sum = std::stod(line.substr(pos + 1));
      EXPECT_NEAR(sum, t.to(torch::kFloat64).sum().item<double>(), 1e-6 * (1 + std::abs(sum))) << line;
      ++lines;
    }
  }
  EXPECT_EQ(lines, static_cast<int>(tensors.size()));
  auto theirs = SafetensorsFile::open(dir + "/theirs.safetensors");
  EXPECT_EQ(theirs->metadata().at("format"), "pt");
  EXPECT_TRUE(torch::equal(theirs->view("w"), torch::arange(6).reshape({2, 3}).to(torch::kBFloat16)));
  EXPECT_TRUE(torch::equal(theirs->view("b"), torch::tensor({true, false})));
  EXPECT_TRUE(torch::allclose(theirs->view("x"), torch::linspace(0, 1, 5, torch::kFloat64)));
}

// A hand-made file: 8-byte length, the given header, `data_bytes` zero bytes.
std::string write_raw(const std::string& dir, const std::string& name, const std::string& header,
                      size_t data_bytes, int64_t declared_len = -1) {
  std::string path = dir + "/" + name;
  std::ofstream out(path, std::ios::binary);
  uint64_t len = declared_len >= 0 ? static_cast<uint64_t>(declared_len) : header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(len >> (8 * i)));
  out << header << std::string(data_bytes, '\0');
  return path;
}

TEST(Safetensors, CorruptFilesGetClearErrors) {
  auto dir = temp_dir("corrupt");
  auto open_error = [](const std::string& path) {
    return testing::error_message_of([&] { SafetensorsFile::open(path); });
  };
  struct Case {
    std::string name, header;
    size_t data;
    int64_t declared;
    std::vector<std::string> expect;
  };
  std::vector<Case> cases = {
      {"short", "", 0, -2, {"too short for a header"}},
      {"header_too_long", "{}", 0, 1000, {"header length 1000 is larger than the file"}},
      {"bad_json", "{\"a\": {\"dtype\": ", 0, -1, {"not valid JSON"}},
      {"out_of_range", R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8, -1,
       {"tensor 'w'", "outside the data section of 8 bytes"}},
      {"overlap",
       R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       12, -1, {"tensors 'a' [0, 8) and 'b' [4, 12) overlap"}},
      {"unknown_dtype", R"({"w":{"dtype":"F8","shape":[1],"data_offsets":[0,1]}})", 1, -1,
       {"tensor 'w'", "unknown dtype 'F8'"}},
      {"shape_mismatch", R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8, -1,
       {"tensor 'w'", "needs 12 bytes but data_offsets hold 8"}},
      {"negative_dim", R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", 0, -1,
       {"tensor 'w'", "non-negative integers"}},
      {"not_object", R"([1,2])", 0, -1, {"must be a JSON object"}},
  };
  for (const auto& c : cases) {
    std::string path;
    if (c.declared == -2) {
      path = dir + "/short";
      std::ofstream(path) << "abc";
    } else {
      path = write_raw(dir, c.name, c.header, c.data, c.declared);
    }
    auto msg = open_error(path);
    EXPECT_NE(msg.find(path), std::string::npos) << c.name << ": the file must be named: " << msg;
    for (const auto& e : c.expect) EXPECT_NE(msg.find(e), std::string::npos) << c.name << ": " << msg;
  }
  // A real file cut short: its tensors now point past the end.
  save_safetensors(dir + "/good.safetensors", {{"w", torch::randn({100})}});
  ASSERT_EQ(::truncate((dir + "/good.safetensors").c_str(), 200), 0);
  auto msg = open_error(dir + "/good.safetensors");
  EXPECT_NE(msg.find("tensor 'w'"), std::string::npos) << msg;
}

TEST(Integrity, Crc32cMatchesTheStandardCheckValuesAndStreams) {
  const std::string digits = "123456789";
  EXPECT_EQ(crc32c(digits.data(), digits.size()), 0xE3069283u) << "the CRC-32C check value";
  const std::vector<uint8_t> zeros(32, 0), ones(32, 0xff);
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu) << "RFC 3720 B.4, 32 bytes of zeros";
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u) << "RFC 3720 B.4, 32 bytes of ones";
  // Any split, at any alignment, continues to the same value.
  std::vector<uint8_t> data(10007);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 2654435761u >> 13);
  const uint32_t whole = crc32c(data.data(), data.size());
  for (size_t cut : {size_t{1}, size_t{3}, size_t{8}, size_t{13}, size_t{4096}, size_t{10006}}) {
    EXPECT_EQ(crc32c(data.data() + cut, data.size() - cut, crc32c(data.data(), cut)), whole) << cut;
  }
  data[5000] ^= 0x10;
  EXPECT_NE(crc32c(data.data(), data.size()), whole) << "one flipped bit changes it";
}

TEST(Integrity, FindsNaNAndInfInEveryFloatingDtype) {
  for (auto dtype : {torch::kFloat32, torch::kFloat64, torch::kBFloat16, torch::kHalf}) {
    auto t = torch::randn({3000}).to(dtype);
    EXPECT_FALSE(find_non_finite(t.data_ptr(), t.numel(), dtype).has_value()) << dtype;
    t[1234] = std::numeric_limits<float>::quiet_NaN();
    t[2000] = -std::numeric_limits<float>::infinity();
    auto bad = find_non_finite(t.data_ptr(), t.numel(), dtype);
    ASSERT_TRUE(bad.has_value()) << dtype;
    EXPECT_EQ(bad->count, 2) << dtype;
    EXPECT_EQ(bad->first, 1234) << dtype;
  }
  // The largest finite values are finite.
  auto big = torch::full({4}, 65504.0).to(torch::kHalf);
  EXPECT_FALSE(find_non_finite(big.data_ptr(), 4, torch::kHalf).has_value());
  auto ints = torch::full({4}, -1, torch::kInt32);  // all bits set: not a float
  EXPECT_FALSE(find_non_finite(ints.data_ptr(), 4, torch::kInt32).has_value());
}

// Bytes flipped on disk are caught at the tensor they hit; the rest of the file still loads.
TEST(Safetensors, AFlippedByteFailsTheChecksumOfItsTensor) {
  auto dir = temp_dir("flip");
  const std::string path = dir + "/m.safetensors";
  save_safetensors(path, {{"a", torch::randn({64})}, {"b", torch::randn({64})}});
  auto clean = SafetensorsFile::open(path);
  ASSERT_EQ(clean->metadata().count("crc32c:a"), 1u) << "we write a checksum per tensor";
  const TensorInfo info = *clean->find("b");
  clean.reset();
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t header_len = 0;
  f.read(reinterpret_cast<char*>(&header_len), 8);
  f.seekp(static_cast<std::streamoff>(8 + header_len + info.begin + 17));
  f.put('\x5a');
  f.close();
  auto damaged = SafetensorsFile::open(path);
  EXPECT_NO_THROW(damaged->view("a"));
  auto msg = testing::error_message_of([&] { damaged->view("b"); });
  EXPECT_NE(msg.find("file '" + path + "': tensor 'b' does not match its checksum"), std::string::npos) << msg;
}

// NaN/Inf is refused when writing (nothing is written) and when reading (naming the tensor),
// unless COLOSSAL_ALLOW_NONFINITE=1.
TEST(Safetensors, NonFiniteTensorsAreNeitherWrittenNorLoaded) {
  auto dir = temp_dir("nonfinite");
  auto w = torch::ones({10});
  w[3] = std::numeric_limits<float>::quiet_NaN();
  auto msg = testing::error_message_of([&] { save_safetensors(dir + "/bad.safetensors", {{"ok", torch::ones({2})}, {"w", w}}); });
  EXPECT_NE(msg.find("not writing '" + dir + "/bad.safetensors': tensor 'w' holds 1 NaN/Inf value of 10 (first at "
                     "flat index 3)"),
            std::string::npos)
      << msg;
  EXPECT_NE(::access((dir + "/bad.safetensors").c_str(), F_OK), 0) << "nothing may be written";
  // A file from elsewhere (no checksums) holding NaN and Inf.
  std::string path = dir + "/theirs.safetensors";
  {
    std::string header = R"({"w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]}})";
    std::ofstream out(path, std::ios::binary);
    uint64_t len = header.size();
    out.write(reinterpret_cast<const char*>(&len), 8);
    out << header;
    const float values[4] = {1.0f, std::numeric_limits<float>::infinity(), 2.0f,
                             std::numeric_limits<float>::quiet_NaN()};
    out.write(reinterpret_cast<const char*>(values), sizeof(values));
  }
  msg = testing::error_message_of([&] { SafetensorsFile::open(path)->view("w"); });
  EXPECT_NE(msg.find("file '" + path + "': tensor 'w' holds 2 NaN/Inf values of 4 (first at flat index 1)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("COLOSSAL_ALLOW_NONFINITE=1"), std::string::npos) << msg;
  ::setenv("COLOSSAL_ALLOW_NONFINITE", "1", 1);
  auto loaded = SafetensorsFile::open(path)->load("w");
  ::unsetenv("COLOSSAL_ALLOW_NONFINITE");
  EXPECT_TRUE(std::isnan(loaded[1][1].item<float>()));
}

TEST(AtomicFile, NothingAppearsUntilCommit) {
  auto dir = temp_dir("atomic");
  std::string path = dir + "/f.txt";
  write_text_atomically(path, "old");
  {
    AtomicFile f(path);
    f.write("new", 3);
    std::ifstream in(path);
    std::string s;
    in >> s;
    EXPECT_EQ(s, "old") << "the real name keeps the old content until commit";
  }  // destroyed without commit
  std::ifstream in(path);
  std::string s;
  in >> s;
  EXPECT_EQ(s, "old");
  struct stat st {};
  EXPECT_NE(::stat((path + ".tmp." + std::to_string(::getpid())).c_str(), &st), 0)
      << "an abandoned temporary file is removed";
}

}  // namespace
}  // namespace colossal::checkpoint
