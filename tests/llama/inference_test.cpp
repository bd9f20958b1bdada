// LLaMA through the generation engine: greedy output through the paged KV cache equals full
// recomputation without a cache, token for token (prompts crossing block boundaries, chunked
// prefill, mixed prefill/decode batches), for LLaMA and Mixtral, fp32 and packed weights; block
// bookkeeping. The engine's own behaviour (batching, preemption, refusals, sampling, streaming)
// is tested on a toy model in tests/core/inference/engine_test.cpp.
#include <gtest/gtest.h>
#include <unistd.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>

#include "core/checkpoint/safetensors.h"
#include "core/inference/engine.h"
#include "core/nn/rotary.h"
#include "core/cuda/ops.h"
#include "kernels/cpu/prefill_gemm.h"
#include "llama/cuda_inference.h"
#include "llama/inference.h"
#include "llama/perplexity.h"
#include "tests/support/id_detokenizer.h"
#include "llama/pretrained.h"
#include "core/peft/lora.h"
#include "tests/llama/tiny_llama.h"
#include "tests/support/errors.h"

namespace colossal::llama {
namespace {

using inference::Engine;
using inference::EngineOptions;
using inference::GenerationRequest;

LlamaConfig tiny_config() {
  LlamaConfig c;
  c.vocab_size = 97;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 96;
  return c;
}

LlamaForCausalLM tiny_model(LlamaConfig c = tiny_config()) {
  torch::manual_seed(11);
  LlamaForCausalLM m(c);
  torch::NoGradGuard no_grad;
  for (auto& p : m->parameters()) p.normal_(0, 0.3);  // decisive logits: no near-ties in argmax
  m->eval();
  return m;
}

// Greedy continuation by full recomputation (no cache), the reference.
std::vector<int64_t> reference_greedy(LlamaForCausalLM& m, std::vector<int64_t> ids, int64_t n) {
  torch::NoGradGuard no_grad;
  std::vector<int64_t> out;
  for (int64_t i = 0; i < n; ++i) {
    auto logits = m->forward(torch::tensor(ids, torch::kInt64).unsqueeze(0));
    int64_t next = logits[0][-1].argmax().item<int64_t>();
    ids.push_back(next);
    out.push_back(next);
  }
  return out;
}

std::vector<int64_t> prompt_of(int64_t len, int64_t salt) { return testing::prompt_of(len, salt, 97); }
GenerationRequest greedy(std::vector<int64_t> prompt, int64_t n) { return testing::greedy_request(std::move(prompt), n); }

Engine make_engine(LlamaForCausalLM& m, EngineOptions o) {
  auto model = std::make_shared<LlamaInference>(m, LlamaInference::Options{});
  return Engine(model, std::make_shared<testing::IdDetokenizer>(), /*eos_id=*/2, o);
}

TEST(Inference, PagedGreedyEqualsFullRecomputation) {
  auto m = tiny_model();
  EngineOptions o;
  o.cache.block_size = 4;  // many block boundaries
  o.cache.num_blocks = 64;
  o.max_batched_tokens = 10;  // prompts are prefilled in chunks, mixed with decodes
  auto engine = make_engine(m, o);
  std::vector<int64_t> lengths = {1, 3, 4, 5, 9, 17, 23};
  std::vector<GenerationRequest> reqs;
  for (size_t i = 0; i < lengths.size(); ++i) reqs.push_back(greedy(prompt_of(lengths[i], i), 11));
  auto results = engine.generate(reqs);
  ASSERT_EQ(results.size(), lengths.size());
  for (size_t i = 0; i < lengths.size(); ++i) {
    SCOPED_TRACE("prompt of " + std::to_string(lengths[i]));
    EXPECT_EQ(results[i].tokens, reference_greedy(m, reqs[i].prompt, 11));
    EXPECT_EQ(results[i].reason, inference::FinishReason::kLength);
  }
  EXPECT_EQ(engine.cache().blocks().used_blocks(), 0) << "every block returned";
}

// A fresh prompt attends through ATen's fused SDPA (not the paged kernel): the same logits as the
// training model's forward at every position.
TEST(Inference, FreshPromptLogitsEqualTheModelsForward) {
  auto m = tiny_model();
  LlamaInference inf(m, LlamaInference::Options{});
  auto ids = prompt_of(40, 1);
  torch::NoGradGuard no_grad;
  auto ref = m->forward(torch::tensor(ids, torch::kInt64).unsqueeze(0))[0];
  auto ours = inf.logits(ids);
  EXPECT_TRUE(torch::allclose(ours, ref, 1e-4, 1e-4)) << (ours - ref).abs().max().item<double>();
  // Fed one token at a time (the decode path) and in chunks of 7 through the paged cache.
  for (int64_t chunk : {1, 7}) {
    auto fed = inf.logits(ids, chunk);
    EXPECT_TRUE(torch::allclose(fed, ref, 1e-4, 1e-4)) << "chunk " << chunk << ": " << (fed - ref).abs().max().item<double>();
  }
}

// Perplexity as llama-perplexity scores a text: chunks of n_ctx with BOS first, the second half
// of each scored, from the model's own forward (tests/python/test_gguf_export.py holds the figure
// to llama-perplexity's on the same file where llama.cpp is built).
TEST(Inference, PerplexityInChunksScoresEachChunksSecondHalf) {
  auto m = tiny_model();
  LlamaInference inf(m, LlamaInference::Options{});
  auto tokens = prompt_of(70, 3);  // 4 chunks of 16 and a tail of 6, dropped
  const int64_t bos = 1, n_ctx = 16;
  torch::NoGradGuard no_grad;
  double nll = 0;
  int64_t scored = 0;
  for (int64_t c = 0; c < 4; ++c) {
    std::vector<int64_t> ids(tokens.begin() + c * n_ctx, tokens.begin() + (c + 1) * n_ctx);
    ids[0] = bos;
    auto logp = torch::log_softmax(m->forward(torch::tensor(ids, torch::kInt64).unsqueeze(0))[0].to(torch::kDouble), 1);
    for (int64_t t = n_ctx / 2; t < n_ctx - 1; ++t, ++scored) nll -= logp[t][ids[t + 1]].item<double>();
  }
  auto r = perplexity_in_chunks(inf, tokens, n_ctx, bos);
  EXPECT_EQ(r.tokens, scored);
  EXPECT_EQ(r.samples, 4);
  EXPECT_NEAR(r.mean_nll, nll / scored, 1e-5);
  EXPECT_NEAR(r.perplexity, std::exp(nll / scored), 1e-4 * r.perplexity);
  // Without a BOS the chunk's own first token stays, and changes what the second half sees.
  EXPECT_NE(perplexity_in_chunks(inf, tokens, n_ctx, -1).mean_nll, r.mean_nll);
  EXPECT_EQ(perplexity_in_chunks(inf, tokens, n_ctx, bos, /*max_chunks=*/2).samples, 2);
  EXPECT_NEAR(perplexity_in_chunks(inf, tokens, n_ctx, bos, 0, /*chunk=*/1).mean_nll, r.mean_nll, 1e-5);
  testing::expect_error_mentions([&] { perplexity_in_chunks(inf, prompt_of(20, 1), n_ctx, bos); },
                                 {"20 tokens", "at least 32"});
}

// A tiny model with an adapter on every linear layer of its blocks (B random, so it changes the
// output), the adapter's values derived from `seed`.
LlamaForCausalLM adapted_model(uint64_t seed, std::vector<std::string> targets = {"all-linear"}) {
  auto m = tiny_model();
  peft::LoraConfig c;
  c.rank = 4;
  c.alpha = 8;
  c.init = "gaussian";
  c.seed = seed;
  c.targets = std::move(targets);
  peft::enable_lora(*m, c, {"lm_head"});
  torch::manual_seed(static_cast<int64_t>(seed));
  torch::NoGradGuard no_grad;
  for (auto& item : m->named_parameters())
    if (item.key().find("lora_B") != std::string::npos) item.value().normal_(0, 0.3);
  return m;
}

TEST(Inference, MultiLoraBatchesGiveEachRequestItsMergedAdaptersOutput) {
  // One engine holding two adapters unmerged; requests under adapter 1, adapter 2 and the base
  // are batched together (prefill and decode mixed) and each gets exactly the greedy tokens of
  // its adapter folded into the weights, run alone.
  auto base = tiny_model();
  auto a1 = adapted_model(5), a2 = adapted_model(9, {"q_proj", "v_proj", "down_proj"});
  auto model = std::make_shared<LlamaInference>(base, LlamaInference::Options{});
  EXPECT_EQ(model->add_adapter(a1), 1);
  EXPECT_EQ(model->add_adapter(a2), 2);
  EXPECT_EQ(model->num_adapters(), 2);
  peft::merge_lora(*a1);
  peft::merge_lora(*a2);
  std::vector<LlamaForCausalLM*> merged = {&base, &a1, &a2};
  EngineOptions o;
  o.cache.block_size = 4;
  o.cache.memory_bytes = 1 << 20;
  o.max_batched_tokens = 24;  // prompts prefill in chunks beside others' decode steps
  Engine engine(model, std::make_shared<testing::IdDetokenizer>(), /*eos_id=*/-1, o);
  std::vector<GenerationRequest> requests;
  std::vector<std::vector<int64_t>> want;
  for (int i = 0; i < 6; ++i) {
    auto r = greedy(prompt_of(9 + 5 * i, i), 8);
    r.adapter = i % 3;
    want.push_back(reference_greedy(*merged[static_cast<size_t>(i % 3)], r.prompt, 8));
    requests.push_back(std::move(r));
  }
  // The adapters do change the output (else the test could not fail).
  EXPECT_NE(want[1], reference_greedy(base, requests[1].prompt, 8));
  EXPECT_NE(want[2], reference_greedy(base, requests[2].prompt, 8));
  const auto results = engine.generate(requests);
  for (size_t i = 0; i < results.size(); ++i) EXPECT_EQ(results[i].tokens, want[i]) << "request " << i;
  auto bad = greedy(prompt_of(5, 1), 2);
  bad.adapter = 3;
  EXPECT_NE(testing::error_message_of([&] { engine.add(bad); }).find("adapter 3: the model holds 2 LoRA adapter(s)"),
            std::string::npos);
}

// Sliding window (Mistral): the training model against a dense reference with the window as an
// explicit mask, then the engine's prefill (SDPA with the mask), chunked and one-token decode
// (the paged kernels, window crossing block boundaries) against the training model; a long
// generation holds at most ceil(window / block) + 1 blocks and follows full recomputation.
TEST(Inference, SlidingWindowMatchesItsMaskEverywhereAndFreesBlocksBehindIt) {
  auto c = tiny_config();
  c.model_type = "mistral";
  c.sliding_window = 6;
  auto m = tiny_model(c);
  torch::NoGradGuard no_grad;
  // The reference: the same weights, attention by hand with the window mask.
  auto ids = prompt_of(40, 3);
  auto x = torch::tensor(ids, torch::kInt64).unsqueeze(0);
  {
    auto full = tiny_model(tiny_config());  // same seed and shapes: the same weights
    for (const auto& p : m->named_parameters()) EXPECT_TRUE(torch::equal(p.value(), full->named_parameters()[p.key()]));
    const int64_t T = 40;
    auto i = torch::arange(T).unsqueeze(1), j = torch::arange(T).unsqueeze(0);
    auto allowed = (j <= i).logical_and(j > i - c.sliding_window);
    EXPECT_FALSE(torch::equal(m->forward(x), full->forward(x))) << "the window changes the logits past it";
    // Shorter than the window: exactly the full model.
    auto short_x = x.narrow(1, 0, c.sliding_window);
    EXPECT_TRUE(torch::allclose(m->forward(short_x), full->forward(short_x), 1e-5, 1e-6));
    // Hand-built: layer by layer with the mask.
    auto h = m->model->embed_tokens->forward(x);
    auto rope = RotaryTables::make(c, T);
    const int64_t d = c.resolved_head_dim();
    for (auto& layer : m->model->layers) {
      auto a = layer->self_attn;
      auto n = layer->input_layernorm->forward(h);
      auto q = a->q_proj->forward(n).view({1, T, 4, d}), k = a->k_proj->forward(n).view({1, T, 2, d});
      auto v = a->v_proj->forward(n).view({1, T, 2, d});
      auto pos = torch::arange(T);
      q = nn::apply_rotary(q, rope.cos, rope.sin, pos).transpose(1, 2);
      k = nn::apply_rotary(k, rope.cos, rope.sin, pos).transpose(1, 2).repeat_interleave(2, 1);
      v = v.transpose(1, 2).repeat_interleave(2, 1);
      auto scores = torch::matmul(q, k.transpose(-1, -2)) / std::sqrt(static_cast<double>(d));
      scores = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<float>::infinity());
      auto att = torch::matmul(scores.softmax(-1), v).transpose(1, 2).reshape({1, T, 4 * d});
      h = h + a->o_proj->forward(att);
      h = h + layer->mlp->forward(layer->post_attention_layernorm->forward(h));
    }
    auto want = m->lm_head->forward(m->model->norm->forward(h));
    auto got = m->forward(x);
    EXPECT_TRUE(torch::allclose(got, want, 1e-4, 1e-5)) << (got - want).abs().max().item<double>();
  }
  LlamaInference inf(m, LlamaInference::Options{});
  auto ref = m->forward(x)[0];
  for (int64_t chunk : {0, 1, 5}) {  // one SDPA prefill, one token at a time, chunks of 5
    auto fed = chunk == 0 ? inf.logits(ids) : inf.logits(ids, chunk);
    EXPECT_TRUE(torch::allclose(fed, ref, 1e-4, 1e-4)) << "chunk " << chunk << ": " << (fed - ref).abs().max().item<double>();
  }
  EngineOptions o;
  o.cache.block_size = 4;
  o.cache.num_blocks = 64;
  o.max_batched_tokens = 8;
  auto engine = make_engine(m, o);
  auto req = greedy(prompt_of(13, 5), 40);
  engine.add(req);
  std::vector<inference::GenerationResult> results;
  std::vector<int64_t> held;  // blocks in use after each step
  while (results.empty()) {
    for (auto& r : engine.step()) results.push_back(std::move(r));
    held.push_back(engine.cache().blocks().used_blocks());
  }
  EXPECT_EQ(results[0].tokens, reference_greedy(m, req.prompt, 40));
  // The prompt of 13 takes two steps (8 tokens a step); every step after it decodes one token
  // and leaves only the blocks of positions the next token sees: ceil(6 / 4) + 1 = 3.
  ASSERT_GT(held.size(), 30u);
  for (size_t k = 2; k + 1 < held.size(); ++k) EXPECT_LE(held[k], 3) << "after step " << k;
  EXPECT_EQ(engine.cache().blocks().used_blocks(), 0);
}

// Gemma 2's blocks in the engine: (1 + w) norms folded, sandwich norms, GeGLU, scaled
// embeddings, soft-capped scores in the prefill and in both paged kernels (head_dim 16: AVX-512
// where the CPU has it; 12: the portable kernel), capped logits, windowed layers alternating
// with global ones. Logits equal the training model's, greedy equals recomputation, and no
// block is freed early: the global layers read the whole context.
TEST(Inference, Gemma2FollowsTheTrainingModelAndKeepsTheGlobalLayersContext) {
  for (int64_t head_dim : {16, 12}) {
    SCOPED_TRACE("head_dim " + std::to_string(head_dim));
    auto c = tiny_config();
    c.model_type = "gemma2";
    c.hidden_act = "gelu_pytorch_tanh";
    c.norm_plus_one = c.scale_embeddings = c.sandwich_norms = true;
    c.head_dim = head_dim;
    c.query_pre_attn_scalar = 20;
    c.attn_logit_softcapping = 2;  // low: the scores of these weights (std 0.3) are bent hard
    c.final_logit_softcapping = 3;
    c.sliding_window = 6;
    c.sliding_layers = {true, false};
    c.tie_word_embeddings = true;
    auto m = tiny_model(c);
    torch::NoGradGuard no_grad;
    auto ids = prompt_of(40, 4);
    auto ref = m->forward(torch::tensor(ids, torch::kInt64).unsqueeze(0))[0];
    EXPECT_LE(ref.abs().max().item<double>(), 3.0) << "logits capped";
    LlamaInference inf(m, LlamaInference::Options{});
    EXPECT_EQ(inf.sliding_window(), 0) << "a global layer keeps every block";
    for (int64_t chunk : {0, 1, 5}) {
      auto fed = chunk == 0 ? inf.logits(ids) : inf.logits(ids, chunk);
      EXPECT_TRUE(torch::allclose(fed, ref, 1e-4, 1e-4)) << "chunk " << chunk << ": "
                                                         << (fed - ref).abs().max().item<double>();
    }
    EngineOptions o;
    o.cache.block_size = 4;
    o.cache.num_blocks = 64;
    o.max_batched_tokens = 10;
    auto engine = make_engine(m, o);
    std::vector<int64_t> lengths = {3, 9, 17};
    std::vector<GenerationRequest> reqs;
    for (size_t i = 0; i < lengths.size(); ++i) reqs.push_back(greedy(prompt_of(lengths[i], i), 12));
    auto results = engine.generate(reqs);
    for (size_t i = 0; i < lengths.size(); ++i)
      EXPECT_EQ(results[i].tokens, reference_greedy(m, reqs[i].prompt, 12)) << "prompt of " << lengths[i];
  }
}

// GPT-2's blocks in the engine: learned positions added to the embeddings, no rotation,
// LayerNorm with biases, the ungated MLP with its biases; prefill, decode and chunks follow the
// training model, greedy equals recomputation.
TEST(Inference, Gpt2FollowsTheTrainingModel) {
  auto c = tiny_test_gpt2();
  c.vocab_size = tiny_config().vocab_size;  // the prompts' ids
  c.max_position_embeddings = tiny_config().max_position_embeddings;
  auto m = tiny_model(c);
  torch::NoGradGuard no_grad;
  auto ids = prompt_of(40, 6);
  auto ref = m->forward(torch::tensor(ids, torch::kInt64).unsqueeze(0))[0];
  LlamaInference inf(m, LlamaInference::Options{});
  for (int64_t chunk : {0, 1, 5}) {
    auto fed = chunk == 0 ? inf.logits(ids) : inf.logits(ids, chunk);
    EXPECT_TRUE(torch::allclose(fed, ref, 1e-4, 1e-4)) << "chunk " << chunk << ": " << (fed - ref).abs().max().item<double>();
  }
  EngineOptions o;
  o.cache.block_size = 4;
  o.cache.num_blocks = 64;
  o.max_batched_tokens = 10;
  auto engine = make_engine(m, o);
  std::vector<GenerationRequest> reqs = {greedy(prompt_of(3, 1), 10), greedy(prompt_of(17, 2), 10)};
  auto results = engine.generate(reqs);
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(results[i].tokens, reference_greedy(m, reqs[i].prompt, 10));
}

// int8/int4 weights: the logits of fp32 arithmetic over the dequantized weights, up to the
// inputs' own int8 rounding (per block of 32 values: half a step of 1/127 of the block's largest),
// and the same greedy choice wherever the choice is clear; bf16 within bf16's rounding; fp16
// (widened exactly, fp32 GEMM on every CPU) bit for bit.
TEST(Inference, QuantizedWeightsFollowTheirDequantizedMath) {
  auto ids = prompt_of(30, 2);
  for (const std::string name : {"int8", "int4", "bf16", "fp16"}) {
    SCOPED_TRACE(name);
    auto m = tiny_model();
    LlamaInference quantized(m, LlamaInference::Options::named(name));
    auto d = tiny_model();
    {
      torch::NoGradGuard no_grad;
      const auto format = kernels::cpu::weight_format(name);
      for (auto& p : d->parameters())
        if (p.dim() == 2) p.copy_(inference::PackedLinear(p, format).unpacked());
    }
    LlamaInference exact(d, LlamaInference::Options{});
    auto ours = quantized.logits(ids), ref = exact.logits(ids);
    const double scale = ref.abs().max().item<double>();
    const double err = (ours - ref).abs().max().item<double>();
    EXPECT_LE(err, (name == "bf16" ? 0.02 : 0.03) * scale) << "max |logit| " << scale;
    const auto format = kernels::cpu::weight_format(name);
    if (name != "fp16" && (__builtin_cpu_supports("avx512bf16") || kernels::cpu::prefill_gemm_supports(format)))
      EXPECT_GT(err, 0.0) << "a bf16 GEMM, or the integer one over int8 tokens, rounds the inputs";
    else  // fp16 always (and int8/int4 on a CPU with neither) multiplies the unpacked weights in fp32
      EXPECT_EQ(err, 0.0);
    if (kernels::cpu::prefill_gemm_supports(format) && !__builtin_cpu_supports("avx512bf16")) {
      // The integer prefill GEMM turned off: the fp32 GEMM over the unpacked weights, bit for bit.
      kernels::cpu::prefill_gemm_enable(false);
      EXPECT_EQ((quantized.logits(ids) - ref).abs().max().item<double>(), 0.0);
      kernels::cpu::prefill_gemm_enable(true);
    }
    // The greedy choice agrees wherever the reference's top two are further apart than twice the error.
    auto top2 = std::get<0>(ref.topk(2, 1));
    auto decisive = (top2.select(1, 0) - top2.select(1, 1)) > 2 * err;
    auto agree = ours.argmax(1) == ref.argmax(1);
    EXPECT_GT(decisive.sum().item<int64_t>(), ids.size() / 2) << "too few decisive positions to judge";
    EXPECT_TRUE(agree.logical_or(decisive.logical_not()).all().item<bool>());
  }
}

// A q8_0 KV cache (--kv_cache_dtype q8_0): decode reads int8 keys and values with a scale per
// group, so the logits follow the fp32 cache's within the cache's rounding (half a step of 1/127
// of each group's largest) and the greedy choice agrees wherever it is clear. Head dims 8 (one
// scale per row: the portable kernel) and 64 (two groups of 32: the vector kernels).
TEST(Inference, Q8KvCacheFollowsTheFp32Cache) {
  for (int64_t hidden : {32, 128}) {
    auto c = tiny_config();
    c.hidden_size = hidden;
    c.num_attention_heads = hidden == 32 ? 4 : 2;
    c.num_key_value_heads = hidden == 32 ? 2 : 1;
    SCOPED_TRACE("head dim " + std::to_string(c.resolved_head_dim()));
    auto m = tiny_model(c);
    LlamaInference exact(m, LlamaInference::Options{});
    LlamaInference::Options o;
    o.kv_cache = at::kChar;
    LlamaInference q8(m, o);
    ASSERT_EQ(q8.cache_shape().dtype, at::kChar);
    auto ids = prompt_of(40, 3);
    auto ref = exact.logits(ids, 1), ours = q8.logits(ids, 1);  // one token at a time: every step reads the cache
    const double scale = ref.abs().max().item<double>();
    const double err = (ours - ref).abs().max().item<double>();
    EXPECT_GT(err, 0.0) << "int8 keys and values are not the fp32 ones";
    EXPECT_LE(err, 0.02 * scale) << "max |logit| " << scale;
    auto top2 = std::get<0>(ref.topk(2, 1));
    auto decisive = (top2.select(1, 0) - top2.select(1, 1)) > 2 * err;
    EXPECT_GT(decisive.sum().item<int64_t>(), static_cast<int64_t>(ids.size()) / 2);
    EXPECT_TRUE((ours.argmax(1) == ref.argmax(1)).logical_or(decisive.logical_not()).all().item<bool>());
  }
  // The memory: int8 values plus an fp32 scale per 32 of them, against 4 bytes a value.
  inference::CacheShape fp32{2, 4, 128, at::kFloat}, q8{2, 4, 128, at::kChar};
  EXPECT_EQ(inference::PagedKVCache::bytes_per_block(q8, 16) * 512,
            inference::PagedKVCache::bytes_per_block(fp32, 16) * (128 + 16));
  LlamaInference::Options bad;
  bad.kv_cache = at::kHalf;
  auto m = tiny_model();
  try {
    LlamaInference model(m, bad);
    ADD_FAILURE() << "a float16 CPU cache";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("KV cache dtype"), std::string::npos) << e.what();
  }
}


// next (the same logits, bit for bit); a changed checkpoint is packed again.
TEST(Inference, PackedMatricesAreKeptWhileTheCheckpointIsUnchanged) {
  auto m = tiny_model();
  const std::string dir = ::testing::TempDir() + "/packed_" + std::to_string(::getpid());
  save_pretrained(m->config(), checkpoint::model_state(*m), dir);
  auto first = LlamaInference::load(dir, LlamaInference::Options::named("int4"));
  const std::string file = dir + "/packed-int4.safetensors";
  ASSERT_EQ(::access(file.c_str(), R_OK), 0) << "not written: " << file;
  auto ids = prompt_of(20, 3);
  auto again = LlamaInference::load(dir, LlamaInference::Options::named("int4"));
  EXPECT_TRUE(torch::equal(first->logits(ids), again->logits(ids)));
  auto sig_matrices = LlamaInference::load_packed(file, inference::WeightFormat::kQ4, "another checkpoint");
  EXPECT_TRUE(sig_matrices.empty()) << "a file made from other weights is not reused";
  EXPECT_TRUE(LlamaInference::load_packed(file, inference::WeightFormat::kQ8, "").empty());
  // Reused: the packed file's matrices, as mapped views.
  auto f = checkpoint::SafetensorsFile::open(file);
  std::string signature = f->metadata().at("signature");
  auto reused = LlamaInference::load_packed(file, inference::WeightFormat::kQ4, signature);
  EXPECT_EQ(reused.size(), first->packed_matrices().size());
  std::system(("rm -rf " + dir).c_str());
}

// Mixtral: every expert runs once per engine step over the tokens routed to it (prefill chunks
// and decodes of several sequences mixed), giving the tokens of full recomputation.
TEST(Inference, MixtralPagedGreedyEqualsFullRecomputation) {
  auto c = tiny_config();
  c.num_local_experts = 4;
  c.num_experts_per_tok = 2;
  auto m = tiny_model(c);
  EngineOptions o;
  o.cache.block_size = 4;
  o.cache.num_blocks = 64;
  o.max_batched_tokens = 10;
  auto engine = make_engine(m, o);
  std::vector<int64_t> lengths = {3, 9, 17};
  std::vector<GenerationRequest> reqs;
  for (size_t i = 0; i < lengths.size(); ++i) reqs.push_back(greedy(prompt_of(lengths[i], i), 8));
  auto results = engine.generate(reqs);
  for (size_t i = 0; i < lengths.size(); ++i)
    EXPECT_EQ(results[i].tokens, reference_greedy(m, reqs[i].prompt, 8)) << "prompt of " << lengths[i];
}

// Without a GPU the GPU engine says so (infer_llama --device cuda reaches this), instead of failing
// inside CUDA; the CUDA kernels' suites are then reported as skipped.
TEST(Inference, TheGpuEngineWithoutAGpuIsAClearError) {
  if (cuda::kernels_usable()) GTEST_SKIP() << "a GPU is visible: nothing to refuse";
  auto m = tiny_model();
  auto msg = testing::error_message_of([&] { LlamaCudaInference(m, {}); });
  EXPECT_NE(msg.find("no CUDA GPU is visible"), std::string::npos) << msg;
}

}  // namespace
}  // namespace colossal::llama
