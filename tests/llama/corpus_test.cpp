// The default corpus: R's serialized character vectors read from the janeaustenr package that
// setup.sh unpacks, and from hand-built files (NA strings, other objects, damage).
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <fstream>

#include "llama/corpus.h"
#include "tests/support/errors.h"

namespace colossal::llama {
namespace {

void put32(std::string& s, int32_t v) {
  for (int shift : {24, 16, 8, 0}) s.push_back(static_cast<char>((static_cast<uint32_t>(v) >> shift) & 0xFF));
}

// One .rdb record: length + zlib(XDR serialization of `object`).
std::string record(const std::string& object) {
  std::string xdr = "X\n";
  put32(xdr, 3);
  put32(xdr, 0x040201);
  put32(xdr, 0x030500);
  put32(xdr, 5);
  xdr += "UTF-8";
  xdr += object;
  uLongf size = compressBound(xdr.size());
  std::string z(size, '\0');
  compress(reinterpret_cast<Bytef*>(z.data()), &size, reinterpret_cast<const Bytef*>(xdr.data()), xdr.size());
  z.resize(size);
  std::string out;
  put32(out, static_cast<int32_t>(xdr.size()));
  return out + z;
}

std::string strings(const std::vector<std::pair<bool, std::string>>& items) {  // (is_na, text)
  std::string o;
  put32(o, 16);
  put32(o, static_cast<int32_t>(items.size()));
  for (const auto& [na, text] : items) {
    put32(o, 9 | (1 << 15));  // CHARSXP, UTF-8 flag
    put32(o, na ? -1 : static_cast<int32_t>(text.size()));
    if (!na) o += text;
  }
  return o;
}

TEST(Corpus, ReadsCharacterVectorsAndSkipsOtherObjects) {
  std::string integer_vector;
  put32(integer_vector, 13);
  put32(integer_vector, 1);
  put32(integer_vector, 42);
  std::string path = ::testing::TempDir() + "hand_" + std::to_string(::getpid()) + ".rdb";
  std::ofstream(path, std::ios::binary) << record(strings({{false, "First line"}, {true, ""}, {false, "café"}}))
                                        << record(integer_vector) << record(strings({{false, "x"}}));
  auto v = read_r_character_vectors(path);
  ASSERT_EQ(v.size(), 2u);
  EXPECT_EQ(v[0], (std::vector<std::string>{"First line", "", "café"}));
  EXPECT_EQ(v[1], (std::vector<std::string>{"x"}));

  // Damage: cut inside the second record's zlib stream.
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string cut = path + ".cut";
  std::ofstream(cut, std::ios::binary) << bytes.substr(0, record(strings({{false, "First line"}, {true, ""}, {false, "café"}})).size() + 9);
  auto msg = testing::error_message_of([&] { read_r_character_vectors(cut); });
  EXPECT_NE(msg.find("record 1"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not a complete zlib stream"), std::string::npos) << msg;
}

TEST(Corpus, JaneAustenFromTheDebianPackage) {
  std::string rdb = default_austen_rdb();
  ASSERT_EQ(::access(rdb.c_str(), R_OK), 0) << rdb << " is missing: scripts/setup.sh fetches it";
  auto novels = read_r_character_vectors(rdb);
  ASSERT_EQ(novels.size(), 6u) << "six novels";
  int64_t lines = 0;
  bool pride = false;
  for (const auto& n : novels) {
    lines += static_cast<int64_t>(n.size());
    pride |= !n.empty() && n[0] == "PRIDE AND PREJUDICE";
  }
  EXPECT_EQ(lines, 73422);
  EXPECT_TRUE(pride);
  std::string out = ::testing::TempDir() + "austen_" + std::to_string(::getpid());
  auto split = write_austen_jsonl(rdb, out, 50);
  EXPECT_GT(split.train_records, 10000);
  EXPECT_NEAR(static_cast<double>(split.valid_records) / (split.train_records + split.valid_records), 0.02, 0.001);
  EXPECT_GT(split.train_bytes, 3'000'000) << "about 4 MB of text";
  std::ifstream train(out + "/train.jsonl");
  std::string first;
  std::getline(train, first);
  EXPECT_EQ(first.rfind("{\"text\":\"", 0), 0u) << first;
}

}  // namespace
}  // namespace colossal::llama
