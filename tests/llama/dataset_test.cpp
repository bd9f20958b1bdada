// JSONL -> cached token files -> batches: pretraining packing, fine-tuning masks, the cache key,
// bad lines reported with file and line.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <numeric>
#include <set>
#include <nlohmann/json.hpp>
#include <tuple>

#include "core/checkpoint/integrity.h"
#include "llama/dataset.h"
#include "tests/support/errors.h"

namespace colossal::llama {
namespace {

struct Fixture {
  std::string dir;
  std::unique_ptr<Tokenizer> tok;
  Fixture() {
    dir = ::testing::TempDir() + "dataset_" + std::to_string(::getpid());
    (void)!std::system(("rm -rf '" + dir + "' && mkdir -p '" + dir + "'").c_str());
    std::ofstream corpus(dir + "/corpus.txt");
    for (int i = 0; i < 50; ++i)
      corpus << "the quick brown fox jumps over the lazy dog " << i << "\nshe said hello and he answered\n";
    corpus.close();
    TrainTokenizerOptions o;
    o.vocab_size = 320;  // 256 byte pieces (byte fallback) + a few merges
    train_tokenizer({dir + "/corpus.txt"}, dir + "/tok", o);
    tok = std::make_unique<Tokenizer>(Tokenizer::load(dir + "/tok.model"));
  }
};

TEST(Dataset, PretrainingPacksCachesAndReportsBadLines) {
  Fixture f;
  std::string jsonl = f.dir + "/pre.jsonl";
  std::ofstream(jsonl) << "{\"text\": \"the quick brown fox\"}\n"
                       << "{\"source\": \"she said\", \"target\": \"hello\"}\n"
                       << "{\"txt\": \"oops\"}\n"
                       << "{\"text\": \"the lazy dog jumps\"}\n";
  DatasetOptions o;
  o.files = {jsonl};
  o.cache_dir = f.dir + "/cache";
  o.max_length = 4;
  auto msg = testing::error_message_of([&] { TokenDataset::open(o, *f.tok); });
  EXPECT_NE(msg.find("pre.jsonl' line 3: expected a string field \"text\""), std::string::npos) << msg;

  o.on_bad_line = "skip";
  auto d = TokenDataset::open(o, *f.tok);
  EXPECT_FALSE(d.reused_cache());
  EXPECT_EQ(d.skipped_lines(), 1);
  int64_t expected = 0;
  for (const char* t : {"the quick brown fox", "she said hello", "the lazy dog jumps"})
    expected += static_cast<int64_t>(f.tok->encode_with(t, true, true).size());
  EXPECT_EQ(d.num_tokens(), expected);
  EXPECT_EQ(d.size(), expected / 4);
  auto b = d.batch({0, 1});
  EXPECT_EQ(b.input_ids.sizes(), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(b.input_ids[0][0].item<int64_t>(), f.tok->bos_id()) << "documents start with BOS";
  EXPECT_TRUE(torch::equal(b.input_ids, b.labels)) << "pretraining: loss on every token";

  auto again = TokenDataset::open(o, *f.tok);
  EXPECT_TRUE(again.reused_cache());
  EXPECT_EQ(again.cache_key(), d.cache_key());
  std::ofstream(jsonl, std::ios::app) << "{\"text\": \"one more line\"}\n";
  auto changed = TokenDataset::open(o, *f.tok);
  EXPECT_FALSE(changed.reused_cache()) << "a changed input gets a new key";
  EXPECT_NE(changed.cache_key(), d.cache_key());
}

// A damaged cache is never trained on: each kind of damage is named in a warning and the cache
// is rebuilt, giving the same batches as before.
TEST(Dataset, ADamagedTokenCacheIsRebuiltWithTheReason) {
  Fixture f;
  std::string jsonl = f.dir + "/cache_me.jsonl";
  {
    std::ofstream out(jsonl);
    for (int i = 0; i < 20; ++i) out << "{\"text\": \"the quick brown fox jumps over the lazy dog " << i << "\"}\n";
  }
  DatasetOptions o;
  o.files = {jsonl};
  o.cache_dir = f.dir + "/cache";
  o.max_length = 8;
  const auto clean = TokenDataset::open(o, *f.tok);
  const auto want = clean.batch({0, 1, 2});
  const std::string base = o.cache_dir + "/" + clean.cache_key();
  const int64_t n = clean.num_tokens();
  auto rewrite = [](const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  };
  auto read = [](const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  // Random ids inside the vocabulary, a consistent description: only the vocabulary check can tell.
  auto ids_outside_vocabulary = [&] {
    std::vector<int32_t> ids(n, 7);
    ids[n / 2] = 5000;
    std::string bytes(reinterpret_cast<const char*>(ids.data()), ids.size() * 4);
    rewrite(base + ".tokens", bytes);
    auto meta = nlohmann::json::parse(read(base + ".json"));
    meta["crc32c"]["tokens"] = checkpoint::crc32c(bytes.data(), bytes.size());
    rewrite(base + ".json", meta.dump());
  };
  const std::vector<std::tuple<std::string, std::function<void()>, std::string>> damage = {
      {"random valid ids", [&] {
         std::vector<int32_t> ids(n);
         for (int64_t i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((i * 7919) % 300);
         rewrite(base + ".tokens", std::string(reinterpret_cast<const char*>(ids.data()), ids.size() * 4));
       }, "'" + base + ".tokens' does not match its checksum"},
      {"truncated tokens", [&] { rewrite(base + ".tokens", read(base + ".tokens").substr(0, 40)); },
       "'" + base + ".tokens' has 40 bytes, expected " + std::to_string(n * 4)},
      {"empty mask", [&] { rewrite(base + ".mask", ""); },
       "'" + base + ".mask' has 0 bytes, expected " + std::to_string(n)},
      {"corrupt description", [&] { rewrite(base + ".json", "{\"files\": [\"x\""); },
       "'" + base + ".json' is not valid JSON"},
      {"missing mask", [&] { std::remove((base + ".mask").c_str()); }, "'" + base + ".mask' is missing"},
      {"ids outside the vocabulary", ids_outside_vocabulary,
       "'" + base + ".tokens' holds id 5000, outside the tokenizer's vocabulary [0, 320)"},
  };
  for (const auto& [what, apply, reason] : damage) {
    apply();
    ::testing::internal::CaptureStderr();
    auto d = TokenDataset::open(o, *f.tok);
    const std::string warning = ::testing::internal::GetCapturedStderr();
    EXPECT_FALSE(d.reused_cache()) << what;
    EXPECT_NE(warning.find("token cache " + reason), std::string::npos) << what << ": " << warning;
    EXPECT_NE(warning.find("tokenising " + jsonl + " again"), std::string::npos) << what << ": " << warning;
    EXPECT_EQ(d.num_tokens(), n) << what;
    auto got = d.batch({0, 1, 2});
    EXPECT_TRUE(torch::equal(got.input_ids, want.input_ids) && torch::equal(got.labels, want.labels)) << what;
    EXPECT_TRUE(TokenDataset::open(o, *f.tok).reused_cache()) << what << ": the rebuilt cache is used again";
  }
}

TEST(Dataset, FineTuningKeepsLossOnAssistantTurnsOnly) {
  Fixture f;
  std::string jsonl = f.dir + "/sft.jsonl";
  std::ofstream(jsonl) << R"({"messages": [{"from": "human", "content": "say hello"},)"
                       << R"( {"from": "assistant", "content": "hello"}]})" << "\n"
                       << R"({"messages": [{"from": "robot", "content": "x"}]})" << "\n";
  DatasetOptions o;
  o.files = {jsonl};
  o.cache_dir = f.dir + "/cache";
  o.mode = "sft";
  o.max_length = 32;
  auto msg = testing::error_message_of([&] { TokenDataset::open(o, *f.tok); });
  EXPECT_NE(msg.find("sft.jsonl' line 2: each message needs \"role\" (user, assistant, system or tool) or \"from\" "
                     "(human or assistant)"), std::string::npos) << msg;
  o.on_bad_line = "skip";
  auto d = TokenDataset::open(o, *f.tok);
  ASSERT_EQ(d.size(), 1);
  auto b = d.batch({0});
  auto human = f.tok->encode_with("[INST] say hello [/INST]", true, false);
  auto reply = f.tok->encode_with("hello", false, true);
  for (size_t t = 0; t < human.size(); ++t) {
    EXPECT_EQ(b.input_ids[0][t].item<int64_t>(), human[t]);
    EXPECT_EQ(b.labels[0][t].item<int64_t>(), -100) << "no loss on the human turn";
  }
  for (size_t t = 0; t < reply.size(); ++t)
    EXPECT_EQ(b.labels[0][human.size() + t].item<int64_t>(), reply[t]) << "loss on the reply and its EOS";
  EXPECT_EQ(b.labels[0][31].item<int64_t>(), -100) << "padding carries no loss";
  msg = testing::error_message_of([] { apply_chat_template("chatml", {}); });
  EXPECT_NE(msg.find("unknown chat template 'chatml' (known: auto, llama2)"), std::string::npos) << msg;
}

TEST(Dataset, ConversationsWithNoReplyInsideMaxLengthAreLeftOut) {
  // A prompt longer than max_length leaves its reply outside the window: such a sample has no
  // target (a step would average over nothing), so it is left out and counted; when every
  // conversation is like that, the error says so.
  Fixture f;
  std::string jsonl = f.dir + "/long.jsonl";
  std::string long_prompt;
  for (int i = 0; i < 40; ++i) long_prompt += "the quick brown fox jumps over the lazy dog ";
  std::ofstream(jsonl) << R"({"messages": [{"from": "human", "content": ")" << long_prompt << R"("},)"
                       << R"( {"from": "assistant", "content": "hello"}]})" << "\n"
                       << R"({"messages": [{"from": "human", "content": "say hello"},)"
                       << R"( {"from": "assistant", "content": "hello"}]})" << "\n";
  DatasetOptions o;
  o.files = {jsonl};
  o.cache_dir = f.dir + "/cache";
  o.mode = "sft";
  o.max_length = 32;
  auto d = TokenDataset::open(o, *f.tok);
  EXPECT_EQ(d.size(), 1);
  EXPECT_EQ(d.replies_past_max_length(), 1);
  auto b = d.batch({0});
  EXPECT_EQ(b.input_ids[0][1].item<int64_t>(), f.tok->encode_with("[INST] say hello [/INST]", true, false)[1])
      << "the sample kept is the short conversation";
  EXPECT_GT(b.labels.ne(-100).sum().item<int64_t>(), 0);
  std::ofstream(jsonl) << R"({"messages": [{"from": "human", "content": ")" << long_prompt << R"("},)"
                       << R"( {"from": "assistant", "content": "hello"}]})" << "\n";
  auto msg = testing::error_message_of([&] { TokenDataset::open(o, *f.tok); });
  EXPECT_NE(msg.find("none of the 1 conversations has a reply within max_length 32: nothing to learn"),
            std::string::npos) << msg;
}

// Packing: every conversation's tokens and targets as it would have them alone, in fewer samples,
// each document's positions from 0; best fit decreasing fills the samples.
TEST(Dataset, PackingHoldsEachConversationAsAloneInFewerSamples) {
  Fixture f;
  std::string jsonl = f.dir + "/chats.jsonl";
  {
    std::ofstream out(jsonl);
    const char* words[] = {"hello", "the quick brown fox", "she said hello and he answered", "lazy dog", "fox"};
    for (int i = 0; i < 12; ++i)
      out << R"({"messages": [{"from": "human", "content": "say )" << words[i % 5] << R"("},)"
          << R"( {"from": "assistant", "content": ")" << words[(i * 3 + 1) % 5] << R"("}]})" << "\n";
  }
  DatasetOptions o;
  o.files = {jsonl};
  o.cache_dir = f.dir + "/cache";
  o.mode = "sft";
  o.max_length = 128;
  auto one = TokenDataset::open(o, *f.tok);
  o.packing = true;
  auto packed = TokenDataset::open(o, *f.tok);
  ASSERT_EQ(one.size(), 12);
  EXPECT_EQ(packed.conversations(), 12);
  EXPECT_LT(packed.size(), 6) << "several conversations per sample";
  // Each conversation alone: its tokens (up to the padding) and its targets.
  std::multiset<std::vector<int64_t>> alone, found;
  int64_t tokens = 0;
  for (int64_t i = 0; i < one.size(); ++i) {
    auto b = one.batch({i});
    const int64_t n = b.labels[0].ne(-100).nonzero().max().item<int64_t>() + 1;  // it ends with a reply's EOS
    std::vector<int64_t> row;
    for (int64_t t = 0; t < n; ++t) row.push_back(b.input_ids[0][t].item<int64_t>());
    for (int64_t t = 1; t < n; ++t) row.push_back(b.labels[0][t].item<int64_t>());
    alone.insert(row);
    tokens += n;
  }
  std::vector<int64_t> all(static_cast<size_t>(packed.size()));
  std::iota(all.begin(), all.end(), 0);
  auto b = packed.batch(all);
  ASSERT_TRUE(b.position_ids.defined());
  for (int64_t r = 0; r < packed.size(); ++r) {
    auto pos = b.position_ids[r];
    for (int64_t start = 0; start < o.max_length;) {
      int64_t end = start + 1;
      while (end < o.max_length && pos[end].item<int64_t>() != 0) ++end;
      EXPECT_EQ(pos[end - 1].item<int64_t>(), end - 1 - start) << "positions count up from 0 in each document";
      EXPECT_EQ(b.labels[r][start].item<int64_t>(), -100) << "a document's first token is no target";
      std::vector<int64_t> row;
      for (int64_t t = start; t < end; ++t) row.push_back(b.input_ids[r][t].item<int64_t>());
      for (int64_t t = start + 1; t < end; ++t) row.push_back(b.labels[r][t].item<int64_t>());
      if (b.labels[r].narrow(0, start, end - start).ne(-100).any().item<bool>()) found.insert(row);  // not padding
      start = end;
    }
  }
  EXPECT_EQ(found, alone);
  EXPECT_NEAR(packed.packed_fill(), static_cast<double>(tokens) / static_cast<double>(packed.size() * 128), 1e-12);
  DatasetOptions pre = o;
  pre.mode = "pretrain";
  auto msg = testing::error_message_of([&] { pre.validate(); });
  EXPECT_NE(msg.find("packing applies to fine-tuning conversations (mode sft)"), std::string::npos) << msg;
}

}  // namespace
}  // namespace colossal::llama
