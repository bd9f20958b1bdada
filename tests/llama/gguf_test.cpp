// GGUF in: a file written by the `gguf` package from PyPI (tests/llama/write_gguf.py, laid out as
// llama.cpp's converter lays it out) from our own checkpoint loads with the checkpoint's
// hyper-parameters, tokenizer and greedy tokens, in f32, f16, q8_0 and q4_0; bad files are
// refused by name.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "core/checkpoint/model_io.h"
#include "core/inference/engine.h"
#include "kernels/cpu/prefill_gemm.h"
#include "llama/gguf.h"
#include "llama/inference.h"
#include "tests/support/id_detokenizer.h"
#include "llama/pretrained.h"
#include "tests/support/errors.h"

namespace colossal::llama {
namespace {

// One checkpoint (random decisive weights, a trained 300-piece tokenizer) for every test.
class Gguf : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = ::testing::TempDir() + "gguf_" + std::to_string(::getpid());
    (void)!std::system(("mkdir -p '" + dir_ + "'").c_str());
    {
      std::ofstream out(dir_ + "/corpus.txt");
      const char* lines[] = {"It is a truth universally acknowledged, that a single man in possession",
                             "of a good fortune, must be in want of a wife. My dear Mr. Bennet, said his",
                             "lady to him one day, have you heard that Netherfield Park is let at last?"};
      for (int r = 0; r < 60; ++r)
        for (const char* l : lines) out << l << "\n";
    }
    TrainTokenizerOptions o;
    o.vocab_size = 300;
    train_tokenizer({dir_ + "/corpus.txt"}, dir_ + "/tok", o);
    auto tok = Tokenizer::load(dir_ + "/tok.model");
    LlamaConfig c;
    c.vocab_size = 300;
    c.hidden_size = 64;
    c.intermediate_size = 96;
    c.num_hidden_layers = 2;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.max_position_embeddings = 64;
    c.rope_theta = 5000;
    c.rms_norm_eps = 1e-5;
    torch::manual_seed(21);
    LlamaForCausalLM m(c);
    {
      torch::NoGradGuard no_grad;
      for (auto& p : m->parameters()) p.normal_(0, 0.3);
    }
    save_pretrained(c, checkpoint::model_state(*m), dir_, {}, &tok);
    // K-quant rows are whole super-blocks of 256: a wider model of the same vocabulary.
    c.hidden_size = 256;
    c.intermediate_size = 512;
    LlamaForCausalLM wide(c);
    save_pretrained(c, checkpoint::model_state(*wide), dir_ + "/wide", {}, &tok);
  }
  static void TearDownTestSuite() { (void)!std::system(("rm -rf '" + dir_ + "'").c_str()); }

  static std::string write(const std::string& type, const std::string& model = "") {
    const std::string out = dir_ + "/model-" + type + ".gguf";
    std::ostringstream cmd;
    cmd << COLOSSAL_TEST_PYTHON << " " << COLOSSAL_TEST_SOURCE_DIR << "/llama/write_gguf.py '"
        << (model.empty() ? dir_ : model) << "' '" << out << "' " << type;
    EXPECT_EQ(std::system(cmd.str().c_str()), 0) << cmd.str();
    return out;
  }

  static std::vector<std::vector<int64_t>> greedy(std::shared_ptr<LlamaInference> model) {
    inference::EngineOptions o;
    o.cache.num_blocks = 32;
    inference::Engine engine(model, std::make_shared<testing::IdDetokenizer>(), 2, o);
    std::vector<inference::GenerationRequest> reqs;
    for (int64_t len : {3, 9, 20}) {
      inference::GenerationRequest r;
      for (int64_t k = 0; k < len; ++k) r.prompt.push_back((k * 37 + len) % 300);
      r.params.temperature = 0;
      r.params.max_tokens = 16;
      r.params.ignore_eos = true;
      reqs.push_back(r);
    }
    std::vector<std::vector<int64_t>> out;
    for (auto& r : engine.generate(reqs)) out.push_back(r.tokens);
    return out;
  }

  static std::string dir_;
};
std::string Gguf::dir_;

TEST_F(Gguf, HyperParametersAndTokenizerComeFromTheFile) {
  auto file = checkpoint::GgufFile::open(write("f32"));
  auto c = gguf_llama_config(*file);
  auto ref = LlamaConfig::from_json_file(dir_ + "/config.json");
  EXPECT_EQ(c.vocab_size, ref.vocab_size);
  EXPECT_EQ(c.hidden_size, ref.hidden_size);
  EXPECT_EQ(c.intermediate_size, ref.intermediate_size);
  EXPECT_EQ(c.num_hidden_layers, ref.num_hidden_layers);
  EXPECT_EQ(c.num_attention_heads, ref.num_attention_heads);
  EXPECT_EQ(c.num_key_value_heads, ref.num_key_value_heads);
  EXPECT_EQ(c.max_position_embeddings, ref.max_position_embeddings);
  EXPECT_DOUBLE_EQ(c.rope_theta, ref.rope_theta);
  EXPECT_NEAR(c.rms_norm_eps, ref.rms_norm_eps, 1e-12);
  EXPECT_EQ(c.tie_word_embeddings, ref.tie_word_embeddings);

  auto original = Tokenizer::load(dir_ + "/tokenizer.model");
  auto rebuilt = gguf_tokenizer(*file);
  EXPECT_EQ(rebuilt.vocab_size(), original.vocab_size());
  EXPECT_EQ(rebuilt.bos_id(), original.bos_id());
  EXPECT_EQ(rebuilt.eos_id(), original.eos_id());
  EXPECT_EQ(rebuilt.unk_id(), original.unk_id());
  for (const std::string text : {"It is a truth universally acknowledged", "  two  spaces, Mr. Bennet!\nnew line",
                                 "café ☃ 1813 — unseen characters", ""}) {
    SCOPED_TRACE(text);
    EXPECT_EQ(rebuilt.encode(text), original.encode(text));
    EXPECT_EQ(rebuilt.decode(rebuilt.encode(text, false)), text);
  }
}

// f32 is exact: the same logits bit for bit as the checkpoint (so the query/key rows are put
// back in place); f16 is the checkpoint within f16's rounding, kept as f16; q8_0 and q4_0 are kept as the
// file's blocks, which are what our own int8/int4 quantization of the checkpoint makes: the same
// logits bit for bit as ours.
TEST_F(Gguf, EveryFormatGivesTheCheckpointsGreedyTokens) {
  auto fp32 = LlamaInference::load(dir_, LlamaInference::Options::named("fp32"));
  const auto reference = greedy(fp32);
  std::vector<int64_t> ids;
  for (int64_t k = 0; k < 30; ++k) ids.push_back((k * 13 + 5) % 300);
  const auto ref_logits = fp32->logits(ids);
  const double scale = ref_logits.abs().max().item<double>();
  auto error = [&](const at::Tensor& logits) { return (logits - ref_logits).abs().max().item<double>() / scale; };

  auto f32 = LlamaInference::load_gguf(write("f32"), {});
  EXPECT_EQ(f32->options().weight_format(), inference::WeightFormat::kF32) << "the file's own format by default";
  EXPECT_TRUE(torch::equal(f32->logits(ids), ref_logits));
  EXPECT_EQ(greedy(f32), reference);

  // f16 stays f16 (llama.cpp's format, widened exactly by the kernels): our own fp16 packing of
  // the checkpoint rounds the same way, so the logits are the same bit for bit.
  auto f16 = LlamaInference::load_gguf(write("f16"), {});
  EXPECT_EQ(f16->options().weight_format(), inference::WeightFormat::kF16);
  const auto f16_logits = f16->logits(ids);
  EXPECT_LT(error(f16_logits), 0.005);
  auto own_f16 = LlamaInference::load(dir_, LlamaInference::Options::named("fp16"));
  EXPECT_TRUE(torch::equal(f16_logits, own_f16->logits(ids)));
  // With an fp32 KV cache (the file's weights kept), the decode kernels, one token at a time,
  // against the prefill's GEMM: only the summation order differs.
  LlamaInference::Options fp32_cache;
  fp32_cache.kv_cache = at::kFloat;
  auto f16_fp32_cache = LlamaInference::load_gguf(dir_ + "/model-f16.gguf", fp32_cache);
  EXPECT_EQ(f16_fp32_cache->options().weight_format(), inference::WeightFormat::kF16);
  EXPECT_EQ(f16_fp32_cache->cache_shape().dtype, at::kFloat);
  EXPECT_LT((f16_fp32_cache->logits(ids, 1) - f16_logits).abs().max().item<double>() / scale, 1e-5);
  auto f16_exact = LlamaInference::load_gguf(dir_ + "/model-f16.gguf", LlamaInference::Options::named("fp32"));
  EXPECT_LT(error(f16_exact->logits(ids)), 0.005) << "f16 values held in fp32";

  for (auto [type, ours, format, bound] : {std::tuple{"q8_0", "int8", inference::WeightFormat::kQ8, 0.03},
                                           std::tuple{"q4_0", "int4", inference::WeightFormat::kQ4, 0.3}}) {
    SCOPED_TRACE(type);
    auto model = LlamaInference::load_gguf(write(type), {});
    EXPECT_EQ(model->options().weight_format(), format);
    EXPECT_EQ(model->options().dtype, at::kBFloat16) << "the KV cache as --dtype " << ours << " has it";
    auto own = LlamaInference::load(dir_, LlamaInference::Options::named(ours));
    auto logits = model->logits(ids);
    EXPECT_TRUE(torch::equal(logits, own->logits(ids))) << "the same blocks as our own " << ours;
    EXPECT_EQ(greedy(model), greedy(own));
    EXPECT_LT(error(logits), bound);
  }
  // Another format than the file's: converted on load (q8_0 blocks dequantized exactly to fp32).
  auto q8 = LlamaInference::load_gguf(dir_ + "/model-q8_0.gguf", {});
  auto converted = LlamaInference::load_gguf(dir_ + "/model-q8_0.gguf", LlamaInference::Options::named("fp32"));
  EXPECT_EQ(converted->options().weight_format(), inference::WeightFormat::kF32);
  auto a = converted->packed_matrices(), b = q8->packed_matrices();
  for (const auto& [name, m] : b) EXPECT_TRUE(torch::equal(a.at(name).unpacked(), m.unpacked())) << name;
}

// K-quant files (random blocks of every type, and a Q4_K_M-like mix with Q6_K in the fused
// query/key/value and down projections of layer 0) against the same blocks dequantized by the
// `gguf` package, llama.cpp's own Python reading of the layouts: our dequantization equals it, the
// prefill gives its logits (the fp32 GEMM over the dequantized weights) or, in integers, within
// the activations' quantization, as the decode path (integer dot products against Q8_K activations) does.
TEST_F(Gguf, KQuantsReadAsLlamaCppsGgufPackageDequantizesThem) {
  std::vector<int64_t> prompt, short_prompt;
  for (int64_t k = 0; k < 30; ++k) prompt.push_back((k * 13 + 5) % 300);
  short_prompt.assign(prompt.begin(), prompt.begin() + 12);  // <= 16 tokens: the matvec kernels
  for (auto [type, format] : {std::pair{"q4_k_m", inference::WeightFormat::kQ4K},
                              std::pair{"q2_k", inference::WeightFormat::kQ2K},
                              std::pair{"q3_k", inference::WeightFormat::kQ3K},
                              std::pair{"q4_k", inference::WeightFormat::kQ4K},
                              std::pair{"q5_k", inference::WeightFormat::kQ5K},
                              std::pair{"q6_k", inference::WeightFormat::kQ6K}}) {
    SCOPED_TRACE(type);
    auto model = LlamaInference::load_gguf(write(type, dir_ + "/wide"), {});
    auto reference = LlamaInference::load_gguf(write(std::string(type) + ":f32", dir_ + "/wide"),
                                               LlamaInference::Options::named("fp32"));
    EXPECT_EQ(model->options().weight_format(), format) << "the file's own format by default";
    auto ours = model->packed_matrices(), theirs = reference->packed_matrices();
    ASSERT_EQ(ours.size(), theirs.size());
    for (const auto& [name, m] : ours) {
      auto diff = (m.unpacked() - theirs.at(name).unpacked()).abs().max().item<double>();
      EXPECT_LE(diff, 1e-6 * theirs.at(name).unpacked().abs().max().item<double>()) << name;
    }
    if (std::string(type) == "q4_k_m") {
      EXPECT_TRUE(ours.at("layers.0.qkv").mixed()) << "Q4_K query/key beside a Q6_K value projection";
      EXPECT_EQ(ours.at("layers.0.down").format(), inference::WeightFormat::kQ6K);
      EXPECT_EQ(ours.at("lm_head").format(), inference::WeightFormat::kQ6K);
      EXPECT_EQ(ours.at("layers.1.down").format(), inference::WeightFormat::kQ4K);
    }
    // The random models are sensitive (a few types' weights make them chaotic), so the decode path
    // is measured against what int8 weights with per-32 activations do to the same model.
    auto int8 = LlamaInference::load_gguf(dir_ + "/model-" + type + ":f32.gguf", LlamaInference::Options::named("int8"));
    for (const auto& ids : {prompt, short_prompt}) {
      auto want = reference->logits(ids);
      auto error = [&](const at::Tensor& got) {
        return (got - want).abs().max().item<double>() / want.abs().max().item<double>();
      };
      const double err = error(model->logits(ids)), int8_err = error(int8->logits(ids));
      // prefill: the same weights in a GEMM, fp32 over the dequantized weights only where the CPU
      // has neither bf16 units (a bf16 GEMM) nor AVX2 (the integer GEMM over int8 tokens)
      const bool rounds = __builtin_cpu_supports("avx512bf16") || kernels::cpu::prefill_gemm_supports(format);
      if (ids.size() > 16)
        EXPECT_LE(err, rounds ? std::max(0.02, 2 * int8_err) : 1e-6) << ids.size() << " tokens; int8 " << int8_err;
      else  // decode: integer dot products against Q8_K activations (one scale per 256 values)
        EXPECT_LT(err, std::max(0.02, 3 * int8_err)) << ids.size() << " tokens; int8 " << int8_err;
    }
  }
  // Another format by name converts every matrix (int8 from the dequantized K blocks).
  auto int8 = LlamaInference::load_gguf(dir_ + "/model-q4_k_m.gguf", LlamaInference::Options::named("int8"));
  for (const auto& [name, m] : int8->packed_matrices())
    EXPECT_EQ(m.format(), inference::WeightFormat::kQ8) << name;
}

TEST_F(Gguf, BadFilesAreRefusedByName) {
  const std::string good = dir_ + "/model-f32.gguf";
  if (::access(good.c_str(), R_OK) != 0) write("f32");
  auto msg = testing::error_message_of([&] { LlamaInference::load_gguf(write("q4_1"), {}); });
  EXPECT_NE(msg.find("tensor 'blk.0.attn_q.weight' is Q4_1"), std::string::npos) << msg;

  const std::string truncated = dir_ + "/truncated.gguf";
  (void)!std::system(("head -c 4000 '" + good + "' > '" + truncated + "'").c_str());
  msg = testing::error_message_of([&] { LlamaInference::load_gguf(truncated, {}); });
  EXPECT_NE(msg.find(truncated), std::string::npos) << msg;
  EXPECT_TRUE(msg.find("truncated") != std::string::npos || msg.find("past the end") != std::string::npos) << msg;

  // Weights that are not finite, as a float or as a block's scale; offsets the alignment breaks.
  msg = testing::error_message_of([&] { LlamaInference::load_gguf(write("f32:nan"), {}); });
  EXPECT_NE(msg.find("tensor 'blk.0.attn_q.weight' (F32) holds a NaN or infinite value at element "), std::string::npos)
      << msg;
  msg = testing::error_message_of([&] { LlamaInference::load_gguf(write("q8_0:nan"), {}); });
  EXPECT_NE(msg.find("tensor 'blk.0.attn_q.weight' (Q8_0) holds a NaN or infinite value at block "), std::string::npos)
      << msg;
  msg = testing::error_message_of([&] { LlamaInference::load_gguf(write("f32:misaligned"), {}); });
  EXPECT_NE(msg.find("not a multiple of general.alignment 64"), std::string::npos) << msg;

  const std::string not_gguf = dir_ + "/config.json";
  msg = testing::error_message_of([&] { checkpoint::GgufFile::open(not_gguf); });
  EXPECT_NE(msg.find("not a GGUF file"), std::string::npos) << msg;
  msg = testing::error_message_of([&] { checkpoint::GgufFile::open(dir_ + "/absent.gguf"); });
  EXPECT_NE(msg.find("cannot open"), std::string::npos) << msg;
}

}  // namespace
}  // namespace colossal::llama
