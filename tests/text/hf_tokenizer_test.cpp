// tokenizer.json against the real thing: tests/text/make_tokenizers.py trains nine tokenizers with
// Hugging Face `tokenizers` on Jane Austen's novels (byte-level BPE with Llama 3's split regex,
// SentencePiece-style BPE with byte fallback read through transformers' AutoTokenizer, WordPiece
// with BERT's normalizer, Unigram with NFKC and Metaspace, a SentencePiece Unigram model with
// nmt_nfkc rules converted by transformers (the Precompiled normalizer of T5/XLM-R, after Nmt),
// GPT-2's byte-level BPE, a BPE whose normalizer maps bytes (ByteLevel), WordLevel with CTC's
// decoder, and a BPE
// with word-piece prefixes, suffixes, digits and punctuation), with special and added tokens;
// ours must give the same ids (with and without special tokens) and the same decoded text for
// every line of the corpus sample and of a Unicode torture file. Bad files are named.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "llama/corpus.h"
#include "tests/support/errors.h"
#include "tests/support/python_check.h"
#include "text/hf_tokenizer.h"
#include "text/regex.h"

namespace colossal::text {
namespace {

// Combining marks, emoji with ZWJ, CJK, RTL, scripts without spaces, \r, long runs of spaces and
// digits, contractions, special and added tokens inside text, NEL and zero-width characters,
// compatibility forms, control characters. One text per line.
const char* const kTorture[] = {
    "na\u00efve caf\u00e9 \u2014 r\u00e9sum\u00e9, e\u0301 a\u0308 n\u0303 \u1e9b\u0323",
    "\U0001F469\u200D\U0001F469\u200D\U0001F467\u200D\U0001F466 family \U0001F3F3\uFE0F\u200D\U0001F308 flag \U0001F600\U0001F600",
    "\u6771\u4eac\u306f\u65e5\u672c\u306e\u9996\u90fd\u3067\u3059\u3002\u6f22\u5b57\u3068\u4eee\u540d",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645 \u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
    "\uc548\ub155\ud558\uc138\uc694 \uc138\uacc4 \u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e04\u0e23\u0e31\u0e1a \u0928\u092e\u0938\u094d\u0924\u0947",
    "carriage\r return\r\r and\ttabs\t\there",
    "a          b    c \t  d",
    "1234567890 3.14159 1,000,000 007 \u0661\u0662\u0663 \u2460\u00b2",
    "Don't I'LL we've THEY'RE it's You'd",
    "Hello<|eot_id|>world <|start_header_id|>user<|end_header_id|>",
    "[INST] hi there [/INST] <s>literal</s> <unk>",
    "the [DAY] x[DAY]y  [DAY]  z",
    "Yesterday morning I went, yesterday morning you came",
    "a\u0085b\u200bc\ufeffd\u00a0e\u3000f",
    "\u0130stanbul \u03a3\u0391\u03a3 stra\u00dfe \ufb01 \uff21\uff22\uff23\uff11\uff12\uff13 \U0001D518\U0001D52B\U0001D526",
    "\uff76\uff80\uff76\uff85 \uff8a\uff9f\uff8b\uff9f \u2122 \u337b \u3300 x\u00b2 \u00bd \ufb03 \u2474 \u33a1 \uff5e",
    "e\u0301\u0302\u0303 \u1100\u1161\u11a8 \u0915\u094d\u0937 \U0001F44D\U0001F3FD \u2000\u2003x\u00a0\u00a0y",
    "\u24b6\u24d1\u216b\u2167x \u02b0\u02e0 \u0f40\u0f72\u0f0b \u0300\u0301alone \u203f\u2040_ \u200c\u200d",
    "ctrl \x01 del \x7f bell \x07",
    "<0x41> <extra_id_0> tail",
    " leading space",
    "trailing space ",
    "   ",
    "a",
    "supercalifragilisticexpialidociousnessintheextreme",
};

const std::vector<std::string> kKinds = {"byte_level_bpe", "sentencepiece_bpe", "wordpiece", "unigram", "sentencepiece_unigram",
                                         "gpt2_bpe", "byte_level_normalized_bpe", "word_level",
                                         "subword_bpe"};

// Built once per process: the corpus, the torture file and every tokenizer with its expectations.
const std::string& fixtures() {
  static const std::string dir = [] {
    const std::string d = testing::fresh_temp_dir("hf_tokenizers");
    std::ofstream corpus(d + "/corpus.txt", std::ios::binary);
    int lines = 0;
    for (const auto& novel : llama::read_r_character_vectors(llama::default_austen_rdb()))
      for (size_t i = 0, kept = 0; i < novel.size() && kept < 1500; ++i)
        if (!novel[i].empty()) corpus << novel[i] << "\n", ++kept, ++lines;
    std::ofstream torture(d + "/torture.txt", std::ios::binary);
    for (const char* t : kTorture) torture << t << "\n";
    corpus.close();
    torture.close();
    const std::string failed = testing::run_python_check(
        COLOSSAL_TEST_PYTHON, "import runpy, sys\nsys.argv = ['make_tokenizers.py', sys.argv[1]]\n"
                              "runpy.run_path('" COLOSSAL_TEST_SOURCE_DIR "/text/make_tokenizers.py', run_name='__main__')\n", d);
    EXPECT_EQ(failed, "") << "the reference tokenizers were not built";
    EXPECT_GT(lines, 5000);
    return d;
  }();
  return dir;
}

std::vector<int64_t> ids_of(const nlohmann::json& j) { return j.get<std::vector<int64_t>>(); }

std::string show(const std::vector<int64_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size() && i < 40; ++i) s += (i ? " " : "") + std::to_string(ids[i]);
  return s + (ids.size() > 40 ? " ..." : "");
}

void expect_same_as_tokenizers(const std::string& kind) {
  const std::string dir = fixtures() + "/" + kind;
  auto tok = HfTokenizer::from_directory(dir);
  std::ifstream in(dir + "/expected.jsonl");
  ASSERT_TRUE(in.good()) << dir;
  std::string line;
  int checked = 0, wrong = 0;
  while (std::getline(in, line)) {
    const auto e = nlohmann::json::parse(line);
    const std::string text = e["text"];
    const auto want = ids_of(e["ids"]), want_plain = ids_of(e["plain"]);
    const auto got = tok->encode(text, true), got_plain = tok->encode(text, false);
    const auto decoded = tok->decode(want, false), decoded_skip = tok->decode(want, true);
    const bool ok = got == want && got_plain == want_plain && decoded == e["decoded"].get<std::string>() &&
                    decoded_skip == e["decoded_skip"].get<std::string>();
    ++checked;
    if (!ok && ++wrong <= 5) {
      ADD_FAILURE() << kind << ": \"" << text << "\"\n  ids      ours   " << show(got) << "\n           theirs " << show(want)
                    << "\n  plain    ours   " << show(got_plain) << "\n           theirs " << show(want_plain)
                    << "\n  decoded  ours   \"" << decoded << "\"\n           theirs \"" << e["decoded"].get<std::string>()
                    << "\"\n  skipped  ours   \"" << decoded_skip << "\"\n           theirs \""
                    << e["decoded_skip"].get<std::string>() << "\"";
    }
  }
  EXPECT_EQ(wrong, 0) << kind << ": " << wrong << " of " << checked << " texts differ";
  EXPECT_GT(checked, 5000) << kind;
}

TEST(HfTokenizer, ByteLevelBpeWithLlama3SplitMatchesTokenizers) { expect_same_as_tokenizers("byte_level_bpe"); }
TEST(HfTokenizer, SentencePieceStyleBpeWithByteFallbackMatchesTransformers) { expect_same_as_tokenizers("sentencepiece_bpe"); }
TEST(HfTokenizer, WordPieceWithBertNormalizerMatchesTokenizers) { expect_same_as_tokenizers("wordpiece"); }
TEST(HfTokenizer, UnigramWithMetaspaceMatchesTokenizers) { expect_same_as_tokenizers("unigram"); }
TEST(HfTokenizer, SentencePieceUnigramWithPrecompiledCharsmapMatchesTokenizers) {
  expect_same_as_tokenizers("sentencepiece_unigram");
}
TEST(HfTokenizer, ByteLevelNormalizerWithSplitMatchesTokenizers) { expect_same_as_tokenizers("byte_level_normalized_bpe"); }
TEST(HfTokenizer, WordLevelWithCtcDecoderMatchesTokenizers) { expect_same_as_tokenizers("word_level"); }
TEST(HfTokenizer, Gpt2ByteLevelBpeMatchesTokenizers) { expect_same_as_tokenizers("gpt2_bpe"); }
TEST(HfTokenizer, SubwordBpeWithPrefixSuffixDigitsPunctuationMatchesTokenizers) { expect_same_as_tokenizers("subword_bpe"); }

// The special tokens tokenizer_config.json names; its add_eos_token (true there) does not add an
// EOS, as transformers 5 reads the directory: tokenizer.json's post-processor decides.
TEST(HfTokenizer, SpecialTokensComeFromTheConfig) {
  auto tok = HfTokenizer::from_directory(fixtures() + "/sentencepiece_bpe");
  ASSERT_TRUE(tok->special_tokens().bos && tok->special_tokens().eos);
  EXPECT_EQ(tok->id_to_token(*tok->special_tokens().bos), "<s>");
  EXPECT_EQ(tok->id_to_token(*tok->special_tokens().eos), "</s>");
  const auto ids = tok->encode("Emma", true);
  ASSERT_GE(ids.size(), 2u);
  EXPECT_EQ(ids.front(), *tok->special_tokens().bos);
  EXPECT_NE(ids.back(), *tok->special_tokens().eos);
  EXPECT_TRUE(tok->is_special(*tok->special_tokens().bos));
}

std::string write(const std::string& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir + "/" + name) << text;
  return dir + "/" + name;
}

TEST(HfTokenizer, BadFilesAreNamed) {
  const std::string dir = testing::fresh_temp_dir("hf_tokenizer_bad");
  auto msg = [&](const std::string& json) {
    return testing::error_message_of([&] { HfTokenizer::from_file(write(dir, "tokenizer.json", json)); });
  };
  auto has = [](const std::string& m, const std::string& part) {
    EXPECT_NE(m.find(part), std::string::npos) << "expected '" << part << "' in: " << m;
  };
  has(msg(R"({"model": {"type": "Sentencepiece"}})"), "$.model.type: model \"Sentencepiece\" is not supported (supported: BPE, WordPiece, Unigram, WordLevel)");
  has(msg(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [3]}})"), "tokenizer.json: $.model.merges[0]: expected a merge \"left right\" or [left, right], found the number 3");
  has(msg(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["a b"]}})"), "$.model.merges[0]: the merge \"a\" + \"b\" uses a token outside the vocabulary");
  has(msg(R"({"model": {"type": "WordPiece", "vocab": {"a": "zero"}}})"), "$.model.vocab.a: expected an integer id, found the string \"zero\"");
  has(msg(R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "(a|b"}, "behavior": "Isolated"},
              "model": {"type": "BPE", "vocab": {}, "merges": []}})"),
      "$.pre_tokenizer.pattern.Regex: regular expression '(a|b' rejected at offset 4");
  has(msg(R"({"pre_tokenizer": {"type": "Split", "pattern": {"Regex": "a"}, "behavior": "Sideways"},
              "model": {"type": "BPE", "vocab": {}, "merges": []}})"),
      "$.pre_tokenizer.behavior: expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous, found the string \"Sideways\"");
  has(msg(R"({"normalizer": {"type": "Rot13"}, "model": {"type": "BPE", "vocab": {}, "merges": []}})"),
      "$.normalizer.type: normalizer \"Rot13\" is not supported");
  has(msg(R"({"normalizer": {"type": "Precompiled", "precompiled_charsmap": "AAA*"},
              "model": {"type": "BPE", "vocab": {}, "merges": []}})"),
      "$.normalizer.precompiled_charsmap: not base64: byte 3 is '*'");
  has(msg(R"({"normalizer": {"type": "Precompiled", "precompiled_charsmap": "ZAAAAAAAAAA="},
              "model": {"type": "BPE", "vocab": {}, "merges": []}})"),
      "$.normalizer.precompiled_charsmap: the charsmap's trie size 100 does not fit its 4 bytes");
  has(msg("{\"model\": "), "tokenizer.json: not valid JSON");
  has(testing::error_message_of([&] { HfTokenizer::from_directory(dir + "/nowhere"); }), "has no tokenizer.json");
}

// \s, \w and \d mean what Oniguruma (and so tokenizers) makes them mean, NEL included.
TEST(HfTokenizer, RegexClassesFollowOniguruma) {
  Regex space(R"(\s+)");
  const std::string nel = "a\u0085b";
  ASSERT_EQ(space.find_all(nel).size(), 1u);
  EXPECT_EQ(space.find_all(nel)[0], std::make_pair(size_t{1}, size_t{3}));
  Regex not_space(R"([^\s\p{L}]+)");
  EXPECT_TRUE(not_space.find_all("\u0085").empty());
  Regex word(R"(\w+)");
  ASSERT_EQ(word.find_all("e\u0301_x").size(), 1u) << "a combining mark and _ are word characters";
}

}  // namespace
}  // namespace colossal::text
