// LLaMA under the hybrid plugin's sequence-parallel modes on real ranks against one process with
// the same seed and the same global batch: losses for 3 AdamW steps with gradient clipping, the
// clipped norm, and every gradient gathered whole after the data-parallel reduction, within
// relative 1e-5 (fp32): split_gather x dp with ZeRO-1, tp x sp x dp with ZeRO-2 (all_to_all) and
// DDP (ring_attn); 2D (x dp 2 under ZeRO-1), 2.5D and 3D grids; the Qwen2, Qwen3, Gemma 2 and GPT-2 blocks under DDP, ZeRO-2, Gemini and tp 2. Invalid combinations of layout and model shape are refused with their reasons
// before any communication. (The plugin itself — tp x dp under DDP and ZeRO, checkpoints across tp
// sizes — is tested on a toy transformer in tests/core/booster/hybrid_plugin_test.cpp.)
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include "core/booster/booster.h"
#include "core/booster/registry.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/parallel/tensor/shard.h"
#include "llama/model.h"
#include "llama/parallelize.h"
#include "tests/llama/tiny_llama.h"
#include "tests/support/errors.h"
#include "tests/support/multirank.h"

namespace colossal::llama {
namespace {

using booster::PluginConfig;

LlamaConfig tiny() { return tiny_test_llama(); }

constexpr int64_t kBatch = 4, kSeq = 16, kSteps = 3;
constexpr double kClip = 0.5;  // below the first steps' norms: clipping takes effect

torch::Tensor global_batches(const LlamaConfig& c = tiny()) {
  auto g = torch::make_generator<at::CPUGeneratorImpl>(21);
  return torch::randint(c.vocab_size, {kSteps, kBatch, kSeq}, g, torch::kInt64);
}

struct Run {
  std::vector<double> losses, norms;
  std::map<std::string, torch::Tensor> grads;  // first step, whole, after clipping
};

Run reference(const LlamaConfig& c = tiny()) {
  torch::manual_seed(5);
  LlamaForCausalLM model(c);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
  auto data = global_batches(c);
  Run run;
  for (int s = 0; s < kSteps; ++s) {
    opt.zero_grad();
    auto loss = model->loss(data[s], data[s]);
    loss.backward();
    run.norms.push_back(torch::nn::utils::clip_grad_norm_(model->parameters(), kClip));
    if (s == 0)
      for (const auto& p : model->named_parameters()) run.grads[p.key()] = p.value().grad().clone();
    opt.step();
    run.losses.push_back(loss.item<double>());
  }
  return run;
}

Run hybrid(const PluginConfig& o, const LlamaConfig& c = tiny()) {
  auto plugin = booster::make_plugin(o);
  check_parallel(c, plugin->dims(), kSeq);
  const auto ctx = parallel::ParallelContext::from(plugin->dims());
  torch::manual_seed(5);
  LlamaForCausalLM model(c, ctx);
  const auto specs = parallel::collect_shard_specs(*model);
  auto opt = std::make_shared<torch::optim::AdamW>(model->parameters(),
                                                    torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
  booster::Booster booster(plugin);
  auto b = booster.boost(model.ptr(), opt);
  auto [dp_rank, dp] = plugin->data_parallel_rank_and_size();
  auto data = global_batches(c);
  Run run;
  for (int s = 0; s < kSteps; ++s) {
    b.optimizer->zero_grad();
    auto mine = data[s].narrow(0, dp_rank * (kBatch / dp), kBatch / dp);  // this replica's samples
    auto loss = model->loss(mine, mine);
    booster.backward(loss, *b.optimizer);
    run.norms.push_back(booster.clip_grad_norm(*b.optimizer, kClip));
    // ZeRO and Gemini keep reduced gradients in their shards.
    const bool whole_grads = (o.name == "hybrid" || o.name == "ddp") && o.options.value("zero_stage", 0) == 0;
    if (s == 0 && whole_grads)
      for (const auto& p : model->named_parameters()) {
        auto it = specs.find(p.key());
        // Copies: a replicated gradient is the DDP bucket's view, which the next step overwrites.
        run.grads[p.key()] = it == specs.end() ? p.value().grad().clone()
                                               : parallel::gather_full(p.value().grad(), it->second).clone();
      }
    b.optimizer->step();
    auto l = torch::tensor({loss.item<double>()}, torch::kFloat64);
    dist::all_reduce(l, dist::world_group(), dist::ReduceOp::kAvg);  // equal tokens per replica
    run.losses.push_back(l.item<double>());
  }
  return run;
}

void expect_same(const Run& want, const Run& got, const std::string& what) {
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_NEAR(got.losses[s], want.losses[s], 1e-5 * std::abs(want.losses[s])) << what << " loss, step " << s;
    EXPECT_NEAR(got.norms[s], want.norms[s], 1e-5 * std::abs(want.norms[s])) << what << " norm, step " << s;
  }
  for (const auto& [name, g] : got.grads) {
    const auto& w = want.grads.at(name);
    ASSERT_EQ(g.sizes(), w.sizes()) << what << ": " << name;
    EXPECT_LE((g - w).abs().max().item<double>(), 1e-5 * w.abs().max().item<double>() + 1e-7)
        << what << ": gradient of " << name;
  }
}

// The hybrid plugin as an application builds it: through the registry.
PluginConfig opts(int tp, int sp, const char* mode, int zero) {
  PluginConfig o;
  o.name = "hybrid";
  o.device = "cpu";
  o.layout.tp = tp;
  o.layout.sp = sp;
  o.layout.sp_mode = mode;
  o.options["zero_stage"] = zero;
  return o;
}

PluginConfig grid_opts(int tp, const char* mode, int depth, int zero) {
  auto o = opts(tp, 1, "none", zero);
  o.layout.tp_mode = mode;
  o.layout.tp_depth = depth;
  return o;
}

// 2D, 2.5D and 3D tensor parallelism: the batch split over the grid's rows, weights and
// activations over its blocks, the loss the mean over every row.
TEST(LlamaHybridParallel, GridTensorParallelMatchesOneProcess) {
  testing::run_ranks(4, [] {
    expect_same(reference(), hybrid(grid_opts(4, "2d", 1, 0)), "tp 4 (2d 2x2), DDP");
  });
  testing::run_ranks(8, [] {
    auto want = reference();
    expect_same(want, hybrid(grid_opts(4, "2d", 1, 1)), "tp 4 (2d 2x2) x dp 2, ZeRO-1");
    expect_same(want, hybrid(grid_opts(8, "2.5d", 2, 0)), "tp 8 (2.5d 2x2x2), DDP");
    expect_same(want, hybrid(grid_opts(8, "3d", 1, 0)), "tp 8 (3d 2x2x2), DDP");
  }, {.world_size = 8, .deadline_s = 240});
}

TEST(LlamaHybridParallel, SplitGatherTimesDataParallelMatchesOneProcess) {
  testing::run_ranks(4, [] {
    auto want = reference();
    expect_same(want, hybrid(opts(2, 2, "split_gather", 1)), "tp 2 (split_gather) x dp 2, ZeRO-1");
  });
}

TEST(LlamaHybridParallel, TensorTimesSequenceTimesDataParallelMatchesOneProcess) {
  testing::run_ranks(8, [] {
    auto want = reference();
    expect_same(want, hybrid(opts(2, 2, "all_to_all", 2)), "tp 2 x sp 2 (all_to_all) x dp 2, ZeRO-2");
    expect_same(want, hybrid(opts(2, 2, "ring_attn", 0)), "tp 2 x sp 2 (ring_attn) x dp 2, DDP");
  }, {.world_size = 8, .deadline_s = 240});
}

// The other decoder families through every data-parallel plugin and tensor parallelism, on
// 4 ranks: Qwen2 (q/k/v biases, tied embedding), Qwen3 (per-head q/k norms whose gradient
// is summed over the tensor group, its own head_dim, biases on all four projections) and
// Gemma 2 (sandwich norms, GeGLU, soft caps on scores and on vocabulary-parallel logits,
// alternating windows) and GPT-2 (learned positions, LayerNorm biases, an ungated MLP with
// biases split over tp).
TEST(LlamaHybridParallel, OtherFamiliesUnderEveryPluginMatchOneProcess) {
  testing::run_ranks(4, [] {
    for (const auto& [family, config] : {std::pair{"qwen2", tiny_test_qwen2()}, std::pair{"qwen3", tiny_test_qwen3()},
                                         std::pair{"gemma2", tiny_test_gemma2()}, std::pair{"gpt2", tiny_test_gpt2()}}) {
      const auto want = reference(config);
      for (const char* name : {"ddp", "zero2", "gemini"}) {
        PluginConfig o;
        o.name = name;
        o.device = "cpu";
        expect_same(want, hybrid(o, config), std::string(family) + " under " + name);
      }
      expect_same(want, hybrid(opts(2, 1, "none", 0), config), std::string(family) + ": tp 2 x dp 2, DDP");
      expect_same(want, hybrid(opts(2, 2, "split_gather", 1), config),
                  std::string(family) + ": tp 2 (split_gather) x dp 2, ZeRO-1");
    }
  }, {.world_size = 4, .deadline_s = 240});
}

// Every check happens before communication: the layout against the world (ParallelDims), the
// plugin's own options (the registry), the model's shape rules (check_parallel).
TEST(LlamaHybridParallel, InvalidCombinationsAreNamed) {
  struct Shape {
    int64_t heads = 4, kv = 2, ffn = 64, seq = 16, experts = 0;
  };
  auto msg = [](PluginConfig o, int world, Shape m = {}) {
    return testing::error_message_of([&] {
      dist::ParallelDims dims(o.layout, world);
      auto c = tiny();
      c.num_attention_heads = m.heads;
      c.num_key_value_heads = m.kv;
      c.intermediate_size = m.ffn;
      if (m.experts > 0) {
        c.num_local_experts = m.experts;
        c.num_experts_per_tok = 2;
      }
      check_parallel(c, dims, m.seq);
    });
  };
  auto has = [](const std::string& msg, const std::string& part) {
    EXPECT_NE(msg.find(part), std::string::npos) << "expected '" << part << "' in: " << msg;
  };
  has(msg(opts(3, 1, "none", 0), 4), "the world of 4 ranks does not divide by pp(1) * sp(1) * tp(3) = 3");
  has(msg(opts(2, 2, "ring_attn", 0), 6), "does not divide by pp(1) * sp(2) * tp(2) = 4");
  has(msg(opts(1, 2, "none", 0), 2), "sp 2 needs an sp_mode");
  has(msg(opts(1, 1, "split_gather", 0), 2), "needs tp > 1");
  has(msg(opts(2, 4, "split_gather", 0), 8), "sp 4 must be 1 or equal to tp 2");
  has(msg(opts(1, 2, "sideways", 0), 2), "sp_mode 'sideways'");
  has(msg(opts(8, 1, "none", 0), 8), "num_attention_heads 4 does not divide by tp 8");
  has(msg(opts(4, 1, "none", 0), 4, {.kv = 3}), "num_key_value_heads 3 and tp 4");
  has(msg(opts(2, 4, "all_to_all", 0), 8), "2 attention heads per tensor-parallel rank (4 / tp 2) do not divide by sp 4");
  has(msg(opts(1, 4, "ring_attn", 0), 4, {.seq = 12}), "ring_attn: sequence length 12 does not divide by 8");
  has(msg(opts(4, 1, "split_gather", 0), 4, {.seq = 6}), "split_gather: sequence length 6 does not divide by 4 (tp)");
  has(msg(opts(4, 1, "none", 0), 4, {.kv = 4, .ffn = 30}), "intermediate_size 30 does not divide by tp 4");
  has(msg(grid_opts(6, "2d", 1, 0), 6), "tp 6 is not a square");
  has(msg(grid_opts(4, "3d", 1, 0), 4), "tp 4 is not a cube");
  has(msg(grid_opts(8, "2.5d", 3, 0), 8), "tp 8 does not divide by tp_depth 3");
  has(msg(grid_opts(4, "2d", 2, 0), 4), "tp_depth 2 is for tp_mode 2.5d only");
  has(msg(grid_opts(4, "2d", 1, 0), 4, {.kv = 1}), "num_key_value_heads 1 must divide by the grid's side q = 2");
  has(msg(grid_opts(4, "2d", 1, 0), 4, {.ffn = 33}), "intermediate_size 33 does not divide into the grid's 2 weight");
  has(msg(grid_opts(8, "3d", 1, 0), 8, {.ffn = 66}), "intermediate_size 66 does not divide into the grid's 4 weight");
  auto staged = opts(1, 1, "none", 0);
  staged.layout.pp = 2;
  staged.layout.fp8_communication = true;
  has(msg(staged, 2, {.experts = 4}), "--fp8_communication with pp 2 and experts: the stages pass the routing");
  auto mixed = grid_opts(4, "2d", 1, 0);
  mixed.layout.sp = 4;
  mixed.layout.sp_mode = "split_gather";
  has(msg(mixed, 4), "split_gather shards the sequence over 1d tensor parallelism; tp_mode 2d");
}

}  // namespace
}  // namespace colossal::llama
