// The SentencePiece tokenizer: trained here, checked against the Python sentencepiece package on
// the same model file (ids and text), LLaMA's special ids, byte fallback, clear errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "llama/tokenizer.h"
#include "tests/support/errors.h"

namespace colossal::llama {
namespace {

std::string make_corpus(const std::string& dir) {
  (void)!std::system(("mkdir -p '" + dir + "'").c_str());
  std::string path = dir + "/corpus.txt";
  std::ofstream out(path);
  const char* lines[] = {
      "It is a truth universally acknowledged, that a single man in possession of a good fortune,",
      "must be in want of a wife. However little known the feelings or views of such a man may be",
      "on his first entering a neighbourhood, this truth is so well fixed in the minds of the",
      "surrounding families, that he is considered the rightful property of some one or other of",
      "their daughters. My dear Mr. Bennet, said his lady to him one day, have you heard that",
      "Netherfield Park is let at last? Mr. Bennet replied that he had not. In 1813, 2024 and 42."};
  for (int r = 0; r < 40; ++r)
    for (const char* l : lines) out << l << "\n";
  return path;
}

TEST(Tokenizer, TrainedModelMatchesPythonSentencepiece) {
  std::string dir = ::testing::TempDir() + "tok_" + std::to_string(::getpid());
  auto corpus = make_corpus(dir);
  TrainTokenizerOptions o;
  o.vocab_size = 300;
  train_tokenizer({corpus}, dir + "/tokenizer", o);
  auto tok = Tokenizer::load(dir + "/tokenizer.model");
  EXPECT_EQ(tok.vocab_size(), 300);
  EXPECT_EQ(tok.unk_id(), 0);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_id(), 2);
  EXPECT_EQ(tok.pad_id(), -1);

  std::string text = "Mr. Bennet's daughters, 1813 — café ☃";  // unseen characters: byte fallback
  auto ids = tok.encode_with(text, /*add_bos=*/true, /*add_eos=*/true);
  EXPECT_EQ(ids.front(), 1);
  EXPECT_EQ(ids.back(), 2);
  EXPECT_EQ(tok.decode(ids), text) << "byte fallback round-trips characters the corpus never had";

  // The same file through the Python package.
  std::string script = dir + "/check.py";
  std::ofstream(script) << "import sys, sentencepiece as spm\n"
                           "sp = spm.SentencePieceProcessor(model_file=sys.argv[1])\n"
                           "text = open(sys.argv[2], encoding='utf-8').read()\n"
                           "print(' '.join(str(i) for i in sp.encode(text)))\n";
  std::ofstream(dir + "/text.txt") << text;
  std::ostringstream cmd_stream;  // (a stream: gcc 12 warns falsely on long string sums)
  cmd_stream << COLOSSAL_TEST_PYTHON << " " << script << " " << dir << "/tokenizer.model " << dir
             << "/text.txt > " << dir << "/py_ids.txt";
  std::string cmd = cmd_stream.str();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(dir + "/py_ids.txt");
  std::vector<int64_t> py;
  int64_t v;
  while (in >> v) py.push_back(v);
  EXPECT_EQ(py, std::vector<int64_t>(ids.begin() + 1, ids.end() - 1));
}

TEST(Tokenizer, ErrorsNameTheFile) {
  auto msg = testing::error_message_of([] { Tokenizer::load("/nonexistent/tokenizer.model"); });
  EXPECT_NE(msg.find("'/nonexistent/tokenizer.model' does not exist"), std::string::npos) << msg;
  std::string bad = ::testing::TempDir() + "not_a_model_" + std::to_string(::getpid());
  std::ofstream(bad) << "hello";
  msg = testing::error_message_of([&] { Tokenizer::load(bad); });
  EXPECT_NE(msg.find("is not a SentencePiece model"), std::string::npos) << msg;
}

}  // namespace
}  // namespace colossal::llama
