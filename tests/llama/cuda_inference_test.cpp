// The GPU engine (llama/cuda_inference) against the CPU engine on the same weights: greedy tokens
// equal (fp32, TF32 off), prompts through SDPA and the paged kernel, chunked prefill mixed with
// decodes, block sizes 16 and 32; bf16 and fp16 logits close to fp32's. And the LLaMA training
// step on the GPU (fused RMSNorm, rotary, SwiGLU, cross entropy kernels) against the CPU's.
// Labelled `cuda`: skipped, with the reason, where no GPU is visible.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/cuda/ops.h"
#include "tests/support/cuda.h"
#include "core/inference/engine.h"
#include "llama/cuda_inference.h"
#include "llama/inference.h"
#include "tests/support/id_detokenizer.h"

namespace colossal::llama {
namespace {

LlamaConfig small_config() {
  LlamaConfig c;
  c.vocab_size = 97;
  c.hidden_size = 256;
  c.intermediate_size = 384;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;  // head dim 64
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 128;
  return c;
}

LlamaForCausalLM small_model() {
  torch::manual_seed(21);
  LlamaForCausalLM m(small_config());
  torch::NoGradGuard no_grad;
  for (auto& p : m->parameters()) p.normal_(0, 0.15);  // decisive logits
  m->eval();
  return m;
}

std::vector<int64_t> prompt_of(int64_t len, int64_t salt) {
  std::vector<int64_t> p;
  for (int64_t i = 0; i < len; ++i) p.push_back((i * 31 + salt * 7 + 3) % 97);
  return p;
}

std::vector<std::vector<int64_t>> generate(std::shared_ptr<inference::CausalLM> model, int64_t block_size) {
  inference::EngineOptions o;
  o.cache.block_size = block_size;
  o.cache.num_blocks = 64;
  o.max_batched_tokens = 24;  // long prompts prefill in chunks beside decodes
  inference::Engine engine(model, std::make_shared<testing::IdDetokenizer>(), /*eos_id=*/2, o);
  std::vector<inference::GenerationRequest> reqs;
  for (int64_t len : {1, 5, 9, 40, 70}) {
    inference::GenerationRequest r;
    r.prompt = prompt_of(len, len);
    r.params.temperature = 0;
    r.params.max_tokens = 20;
    r.params.ignore_eos = true;
    reqs.push_back(r);
  }
  std::vector<std::vector<int64_t>> out;
  for (auto& r : engine.generate(reqs)) out.push_back(r.tokens);
  return out;
}

TEST(LlamaCuda, GreedyTokensOnTheGpuEqualTheCpuEngines) {
  COLOSSAL_SKIP_WITHOUT_GPU();
  at::globalContext().setAllowTF32CuBLAS(false);
  auto m = small_model();
  auto cpu = std::make_shared<LlamaInference>(m, LlamaInference::Options{});
  auto gpu = std::make_shared<LlamaCudaInference>(m, LlamaCudaInference::Options{{c10::kCUDA, 0}, at::kFloat});
  for (int64_t bs : {16, 32}) {
    SCOPED_TRACE("block size " + std::to_string(bs));
    EXPECT_EQ(generate(gpu, bs), generate(cpu, bs));
  }
}

TEST(LlamaCuda, HalfPrecisionLogitsStayCloseToFp32) {
  COLOSSAL_SKIP_WITHOUT_GPU();
  at::globalContext().setAllowTF32CuBLAS(false);
  auto m = small_model();
  auto logits = [&](at::ScalarType dtype) {
    LlamaCudaInference model(m, {{c10::kCUDA, 0}, dtype});
    inference::KVCacheOptions o;
    o.block_size = 16;
    o.num_blocks = 8;
    inference::PagedKVCache cache(model.cache_shape(), o);
    const auto ids = prompt_of(40, 3);
    const auto n = static_cast<int64_t>(ids.size());
    cache.blocks().reserve(0, n);
    inference::ModelInput in;
    in.tokens = torch::tensor(ids, torch::kLong);
    in.positions = torch::arange(n, torch::kLong);
    std::vector<int64_t> slots;
    for (int64_t i = 0; i < n; ++i) slots.push_back(cache.blocks().slot(0, i));
    in.attention.slots = torch::tensor(slots, torch::kLong);
    auto table = cache.blocks().table(0);
    in.attention.block_tables = torch::tensor(std::vector<int32_t>(table.begin(), table.end()), torch::kInt).unsqueeze(0);
    in.attention.token_seq = torch::zeros({n}, torch::kInt);
    in.attention.token_context = (torch::arange(n) + 1).to(torch::kInt);
    in.sample_index = torch::arange(n, torch::kLong);
    return model.forward(in, cache);
  };
  auto want = logits(at::kFloat);
  for (auto dtype : {at::kBFloat16, at::kHalf}) {
    SCOPED_TRACE(c10::toString(dtype));
    auto got = logits(dtype);
    const double rel = ((got - want).norm() / want.norm()).item<double>();
    EXPECT_LT(rel, dtype == at::kHalf ? 0.01 : 0.03);
  }
}

TEST(LlamaCuda, TrainingStepOnTheGpuFollowsTheCpu) {
  COLOSSAL_SKIP_WITHOUT_GPU();
  at::globalContext().setAllowTF32CuBLAS(false);
  auto cpu = small_model();
  cpu->train();
  auto gpu = small_model();
  gpu->train();
  gpu->to(torch::Device(c10::kCUDA, 0));
  auto ids = torch::randint(0, 97, {2, 33}, torch::kLong);
  auto input = ids.narrow(1, 0, 32), labels = ids.narrow(1, 1, 32).clone();
  labels[1][5] = -100;
  auto lc = cpu->loss(input, labels);
  lc.backward();
  auto lg = gpu->loss(input.cuda(), labels.cuda());
  lg.backward();
  EXPECT_NEAR(lg.item<double>(), lc.item<double>(), 1e-5 * std::abs(lc.item<double>()));
  auto pc = cpu->named_parameters(), pg = gpu->named_parameters();
  for (const auto& item : pc) {
    auto want = item.value().grad(), got = pg[item.key()].grad().cpu();
    const double err = ((got - want).abs().max() / (want.abs().max() + 1e-12)).item<double>();
    EXPECT_LT(err, 1e-4) << item.key();
  }
}

}  // namespace
}  // namespace colossal::llama
