// The analysis formulas (core/tools/model_analysis.h) on LLaMA's own shapes: parameter counts of
// GQA, tied and MoE models exactly, the benchmark's FLOPs, activation memory within 15% of the
// memory tracer's; and --plugin auto's pick among measured LLaMA steps on real ranks. (The
// formulas and the search on a model defined in the tests: tests/core/tools.)
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <iostream>
#include <map>
#include <set>

#include "core/booster/booster.h"
#include "core/booster/registry.h"
#include "core/dist/parallel_dims.h"
#include "core/dist/runtime.h"
#include "core/tools/layout_search.h"
#include "core/tools/memory_tracer.h"
#include "core/tools/model_analysis.h"
#include "llama/config.h"
#include "llama/model.h"
#include "llama/layout_trial.h"
#include "llama/parallelize.h"
#include "llama/shapes.h"
#include "tests/llama/tiny_llama.h"
#include "tests/support/errors.h"
#include "tests/support/multirank.h"

namespace colossal::llama {
namespace {

struct Traced {
  int64_t layer_kept = 0;
  int64_t forward_kept = 0;
  std::string table;
};

Traced trace_forward(const LlamaConfig& c, int64_t batch, int64_t seq, bool checkpointing) {
  torch::manual_seed(0);
  LlamaForCausalLM model(c);
  model->train();
  model->set_gradient_checkpointing(checkpointing);
  auto ids = torch::randint(0, c.vocab_size, {batch, seq});
  tools::MemoryTracer tracer;
  tracer.begin_step();
  tracer.phase("forward");
  auto loss = model->loss(ids, ids);
  tracer.phase("backward");
  loss.backward();
  tracer.end_step(0);
  Traced t;
  for (const auto& row : tracer.modules())
    if (row.name == "layers.1") t.layer_kept = row.figures.kept;
  t.forward_kept = tracer.phases().at(0).second.kept;
  t.table = tracer.format();
  return t;
}

LlamaConfig shaped(int64_t h, int64_t i, int64_t heads, int64_t kv, int64_t layers = 3) {
  auto c = tiny_test_llama();
  c.hidden_size = h;
  c.intermediate_size = i;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv;
  c.num_hidden_layers = layers;
  c.max_position_embeddings = 256;
  return c;
}

void expect_within(double predicted, double measured, double tolerance, const std::string& what) {
  EXPECT_NEAR(predicted, measured, tolerance * measured)
      << what << ": predicted " << predicted << ", measured " << measured << " (" << 100 * (predicted / measured - 1) << "%)";
}

TEST(LlamaModelAnalysis, ParameterCountsMatchTheModels) {
  auto gqa = shaped(64, 96, 8, 2);
  auto tied = shaped(48, 80, 4, 4);
  tied.tie_word_embeddings = true;
  auto moe = shaped(32, 48, 4, 2, 2);
  moe.num_local_experts = 4;
  moe.num_experts_per_tok = 2;
  auto qwen2 = gqa;  // q/k/v biases
  qwen2.model_type = "qwen2";
  qwen2.qkv_bias = true;
  auto qwen3 = gqa;  // q/k norms, a head_dim of its own
  qwen3.model_type = "qwen3";
  qwen3.qk_norm = true;
  qwen3.head_dim = 16;
  auto gemma2 = gqa;  // four norms a layer, a tied head
  gemma2.model_type = "gemma2";
  gemma2.sandwich_norms = gemma2.norm_plus_one = gemma2.tie_word_embeddings = true;
  gemma2.head_dim = 32;
  auto gpt2 = gqa;  // learned positions, LayerNorm and MLP biases, no gate
  gpt2.model_type = "gpt2";
  gpt2.num_key_value_heads = gpt2.num_attention_heads;
  gpt2.learned_positions = gpt2.layer_norm = gpt2.mlp_bias = gpt2.attention_bias = gpt2.tie_word_embeddings = true;
  gpt2.gated_mlp = false;
  gpt2.hidden_act = "gelu_pytorch_tanh";
  auto biased = gqa;  // LLaMA's attention_bias: biases on the projections, RMSNorm without one
  biased.attention_bias = true;
  for (const auto& c : {gqa, tied, moe, qwen2, qwen3, gemma2, gpt2, biased}) {
    LlamaForCausalLM model(c);
    int64_t actual = 0;
    for (const auto& p : model->parameters()) actual += p.numel();
    EXPECT_EQ(c.num_parameters(), actual) << c.model_type;
    EXPECT_EQ(tools::total_parameters(model_spec(c)), actual) << model_spec(c).family << " tied " << c.tie_word_embeddings;
  }
  // A MoE layer's active parameters per token: its top-k experts only.
  for (const auto& m : tools::parameters_by_module(model_spec(moe)))
    if (m.name == "layers.0.experts") EXPECT_EQ(m.active * 4, m.parameters * 2);
}

TEST(LlamaModelAnalysis, FlopsAgreeWithTheBenchmarkArithmetic) {
  for (const char* name : {"S", "M"}) {
    auto shape = benchmark_shape(name);
    auto f = tools::flops_per_token(model_spec(shape.config), shape.sequence);
    EXPECT_NEAR(f.training, training_flops_per_token(shape.config, shape.sequence), 1e-6 * f.training) << name;
    EXPECT_DOUBLE_EQ(f.training_recompute, f.training * 4 / 3);
  }
}

// What the memory tracer measures a layer keeping for backward, against the formula, on shapes
// apart from the ones the constants were fitted on (fp32; with and without checkpointing).
TEST(LlamaModelAnalysis, ActivationMemoryWithinFifteenPercentOfMeasured) {
  struct Case {
    int64_t h, i, heads, kv, batch, seq;
  };
  for (const Case& k : std::vector<Case>{{96, 160, 6, 2, 3, 48}, {64, 256, 4, 4, 2, 96}, {128, 192, 8, 4, 1, 128}}) {
    auto c = shaped(k.h, k.i, k.heads, k.kv);
    tools::Layout l;
    l.precision = "fp32";
    l.micro_batch = k.batch;
    l.sequence = k.seq;
    const auto predicted = tools::activation_bytes(model_spec(c), l);
    const std::string what = c10::str("h ", k.h, " i ", k.i, " heads ", k.heads, "/", k.kv, " batch ", k.batch, " seq ", k.seq);
    auto plain = trace_forward(c, k.batch, k.seq, false);
    expect_within(predicted.per_layer, plain.layer_kept, 0.15, what + ": one layer");
    expect_within(predicted.total, plain.forward_kept, 0.15, what + ": the whole forward\n" + plain.table);
    auto ckpt = trace_forward(c, k.batch, k.seq, true);
    expect_within(predicted.per_layer_checkpointed, ckpt.layer_kept, 0.15, what + ": one checkpointed layer");
    l.activation_checkpointing = true;
    expect_within(tools::activation_bytes(model_spec(c), l).total, ckpt.forward_kept, 0.15,
                  what + ": the checkpointed forward\n" + ckpt.table);
  }
}

// The selector on 2 and 4 ranks against an exhaustive measurement of the same (small) space: its
// pick, timed again beside every other layout (the better of two passes), is one of the two
// fastest or within 30% of the fastest (steps of tens of milliseconds on a shared 2-core machine
// vary by that much from run to run; the layouts here differ by up to 6x). CTest runs it alone.
TEST(LayoutSearchMultiRank, PickIsAmongTheMeasuredFastest) {
  for (int ranks : {2, 4}) {
    testing::run_ranks(ranks, [] {
      auto c = shaped(64, 128, 4, 4, 4);
      c.vocab_size = 256;
      const int world = dist::world_size();
      tools::SearchSpace space;
      space.world = world;
      space.global_batch = 16;
      space.sequence = 64;
      space.try_checkpointing = false;
      space.try_offload = false;
      space.plugins = {"ddp", "zero2", "hybrid"};
      tools::TrialOptions o;
      o.sequence = space.sequence;
      o.steps = 3;
      auto valid = [&](const tools::Layout& l) { return layout_is_valid(c, l, world, space.sequence); };
      auto time = [&](const tools::Layout& l) { return time_training_steps(c, l, booster::PluginConfig{}, o); };
      const auto spec = model_spec(c);
      auto ranked = tools::rank_layouts(spec, tools::enumerate_layouts(spec, space, valid), tools::measure_rates(&spec), space);
      auto report = tools::select_layout(ranked, time, {.trials = 3, .budget_s = 60});
      const std::string pick = report.candidates.at(report.chosen).layout.describe();
      // Every layout timed in two interleaved passes, each keeping its faster time (and the
      // trials' own times): one slow pass (another process on the cores) does not decide.
      std::map<std::string, double> sweep;
      for (const auto& cand : report.candidates)
        if (cand.measured_s) sweep[cand.layout.describe()] = *cand.measured_s;
      for (int pass = 0; pass < 2; ++pass)
        for (const auto& cand : ranked) {
          const double t = time(cand.layout);
          auto [it, added] = sweep.emplace(cand.layout.describe(), t);
          if (!added) it->second = std::min(it->second, t);
        }
      double best = 1e300;
      for (const auto& [name, t] : sweep) best = std::min(best, t);
      std::string table;
      for (const auto& [name, s] : sweep) table += c10::str("  ", name, " ", s, "\n");
      int faster = 0;
      for (const auto& [name, s] : sweep) faster += s < sweep.at(pick);
      EXPECT_TRUE(faster <= 1 || sweep.at(pick) <= 1.3 * best)
          << "picked " << pick << " on " << world << " ranks\n" << table << report.format();
    });
  }
}

}  // namespace
}  // namespace colossal::llama
