// Mixture of experts: the router (top-k, renormalised, capacity in GShard's order, the
// load-balancing and z losses), dispatch against a token-by-token reference, Mixtral both ways
// with transformers (logits and the auxiliary loss), and expert parallelism on real ranks
// against one process: ep 2 x edp 2 (DDP, ZeRO-1, ZeRO-2), ep 4, ep 2 x tp 2 and a capacity factor, loss,
// clipped norm, every gradient and every parameter after two SGD-momentum steps within 1e-5;
// pp 2 x ep 2 (1f1b and zbh1); a checkpoint saved at ep 4 resumes at ep 2.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>

#include "core/booster/booster.h"
#include "core/booster/registry.h"
#include "core/checkpoint/model_io.h"
#include "core/checkpoint/safetensors.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/parallel/expert/dispatch.h"
#include "core/parallel/expert/router.h"
#include "llama/model.h"
#include "llama/parallelize.h"
#include "llama/pipeline.h"
#include "llama/pretrained.h"
#include "tests/llama/tiny_llama.h"
#include "tests/support/errors.h"
#include "tests/support/python_check.h"
#include "tests/support/multirank.h"

namespace colossal::llama {
// Named, not anonymous: the unity build compiles this file with others (cmake/unity.cmake).
namespace moe_test {

namespace ex = parallel::expert;

// ---- the router ----

TEST(MoERouting, TopKIsRenormalisedAndCapacityServesFirstChoicesFirst) {
  // 4 tokens, 3 experts, top 2. Probabilities by row: the best two, renormalised.
  auto logits = torch::tensor({{2.0, 1.0, 0.0}, {0.0, 3.0, 1.0}, {1.0, 0.0, 2.0}, {0.5, 2.5, 0.0}});
  ex::RouterOptions o{.num_experts = 3, .top_k = 2};
  auto r = ex::route(logits, o);
  EXPECT_TRUE(torch::equal(r.experts, torch::tensor({{0, 1}, {1, 2}, {2, 0}, {1, 0}}, torch::kInt64)));
  auto p = torch::softmax(logits, -1);
  auto top = std::get<0>(p.topk(2, -1));
  EXPECT_TRUE(torch::allclose(r.weights, top / top.sum(-1, true)));
  EXPECT_TRUE(r.kept.all().item<bool>());
  EXPECT_EQ(r.capacity, 0);
  // Capacity 0.75 x 4 x 2 / 3 = 2 per expert. First choices: e0 <- t0; e1 <- t1, t3; e2 <- t2.
  // Second choices in token order: t0 -> e1 (full: dropped), t1 -> e2 (kept), t2 -> e0 (kept),
  // t3 -> e0 (full: dropped).
  o.capacity_factor = 0.75;
  auto c = ex::route(logits, o);
  EXPECT_EQ(c.capacity, 2);
  EXPECT_TRUE(torch::equal(c.kept, torch::tensor({{true, false}, {true, true}, {true, true}, {true, false}})))
      << c.kept;
  ex::RouterLosses losses;
  losses.add(c);
  EXPECT_EQ(losses.dropped(), 2);
  EXPECT_TRUE(torch::equal(losses.tokens_per_expert(), torch::tensor({2.0f, 2.0f, 2.0f})));
}

TEST(MoERouting, LossesPoolEveryLayerAsTransformersDoes) {
  auto g = torch::make_generator<at::CPUGeneratorImpl>(3);
  auto a = torch::randn({10, 4}, g), b = torch::randn({6, 4}, g);
  ex::RouterOptions o{.num_experts = 4, .top_k = 2};
  ex::RouterLosses losses;
  losses.add(ex::route(a, o));
  losses.add(ex::route(b, o));
  // Written from the definition: E x sum_e (share of assignments to e) x (mean probability of e),
  // over both layers' tokens together; the z-loss is the mean squared log-partition.
  auto all = torch::cat({a, b});
  auto probs = torch::softmax(all, -1);
  auto chosen = std::get<1>(probs.topk(2, -1));
  auto counts = torch::one_hot(chosen, 4).sum(std::vector<int64_t>{0, 1}).to(torch::kFloat32) / 16.0;
  auto want = (counts * probs.mean(0)).sum() * 4.0;
  EXPECT_NEAR(losses.load_balancing_loss().item<double>(), want.item<double>(), 1e-6);
  EXPECT_NEAR(losses.z_loss().item<double>(), torch::logsumexp(all, -1).pow(2).mean().item<double>(), 1e-5);
  auto msg = testing::error_message_of([] { ex::RouterOptions{.num_experts = 4, .top_k = 5}.validate(); });
  EXPECT_NE(msg.find("num_experts_per_tok: expected 1..4"), std::string::npos) << msg;
}

// Dispatch by sorted expert equals the token-by-token sum, in values and gradients, with drops.
TEST(MoERouting, DispatchMatchesTokenByTokenExperts) {
  auto g = torch::make_generator<at::CPUGeneratorImpl>(7);
  const int64_t N = 12, D = 6, E = 4;
  auto x = torch::randn({N, D}, g).requires_grad_(true);
  auto gate = torch::randn({E, D}, g).requires_grad_(true);
  std::vector<torch::Tensor> w;
  for (int64_t e = 0; e < E; ++e) w.push_back(torch::randn({D, D}, g).requires_grad_(true));
  for (double factor : {0.0, 0.5}) {
    ex::RouterOptions o{.num_experts = E, .top_k = 2, .capacity_factor = factor};
    auto routing = ex::route(torch::linear(x, gate), o);
    ex::LocalExperts experts;
    experts.run = [&](int64_t e, const torch::Tensor& rows) { return torch::tanh(torch::linear(rows, w[e])); };
    ex::ExpertPlacement every;
    every.num_experts = E;
    auto fast = ex::dispatch_and_combine(x, routing, every, experts);
    std::vector<torch::Tensor> rows;
    for (int64_t n = 0; n < N; ++n) {
      auto acc = torch::zeros({D});
      for (int64_t j = 0; j < 2; ++j) {
        if (!routing.kept[n][j].item<bool>()) continue;
        auto e = routing.experts[n][j].item<int64_t>();
        acc = acc + routing.weights[n][j] * torch::tanh(torch::linear(x[n], w[e]));
      }
      rows.push_back(acc);
    }
    auto slow = torch::stack(rows);
    EXPECT_TRUE(torch::allclose(fast, slow, 1e-6, 1e-6)) << "factor " << factor;
    std::vector<torch::Tensor> inputs = {x, gate};
    inputs.insert(inputs.end(), w.begin(), w.end());
    auto up = torch::randn({N, D}, g);
    auto gf = torch::autograd::grad({(fast * up).sum()}, inputs, {}, true, false, true);
    auto gs = torch::autograd::grad({(slow * up).sum()}, inputs, {}, true, false, true);
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (!gs[i].defined()) continue;  // an expert no token reached
      EXPECT_TRUE(torch::allclose(gf[i], gs[i], 1e-5, 1e-6)) << "factor " << factor << ", input " << i;
    }
    if (factor > 0) EXPECT_FALSE(routing.kept.all().item<bool>()) << "the capacity drops something";
  }
}

// ---- Mixtral ----

const char* kScript = R"PY(
import sys, torch
from safetensors.torch import load_file, save_file
from transformers import MixtralConfig, MixtralForCausalLM
d = sys.argv[1]
ids = load_file(d + "/ids.safetensors")["ids"]
ours = MixtralForCausalLM.from_pretrained(d + "/ours", dtype=torch.float32).eval()
with torch.no_grad():
    save_file({"logits": ours(ids).logits.contiguous()}, d + "/ours_in_transformers.safetensors")
cfg = MixtralConfig(vocab_size=96, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                    num_local_experts=4, num_experts_per_tok=2, router_aux_loss_coef=0.02)
torch.manual_seed(0)
theirs = MixtralForCausalLM(cfg).eval()
with torch.no_grad():
    for p in theirs.parameters():
        p.normal_(0, 0.2)
theirs.save_pretrained(d + "/theirs")
ids2 = torch.randint(0, 96, (2, 12))
with torch.no_grad():
    out = theirs(ids2, output_router_logits=True)
save_file({"ids": ids2, "logits": out.logits.contiguous(), "aux": out.aux_loss.reshape(1)},
          d + "/theirs_logits.safetensors")
)PY";

LlamaConfig tiny_mixtral() {
  auto c = tiny_test_llama();
  c.num_local_experts = 4;
  c.num_experts_per_tok = 2;
  c.router_aux_loss_coef = 0.02;
  c.router_z_loss_coef = 0.001;
  return c;
}

TEST(Mixtral, RoundTripsWithTransformersWithTheSameAuxiliaryLoss) {
  std::string d = testing::fresh_temp_dir("mixtral");
  auto c = tiny_mixtral();
  torch::manual_seed(0);
  LlamaForCausalLM model(c);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.normal_(0, 0.2);
  }
  save_pretrained(c, checkpoint::model_state(*model), d + "/ours");
  auto ids = torch::randint(c.vocab_size, {2, 10}, torch::kInt64);
  checkpoint::save_safetensors(d + "/ids.safetensors", {{"ids", ids}});
  const auto failed = testing::run_python_check(COLOSSAL_TEST_PYTHON, kScript, d);
  ASSERT_EQ(failed, "") << "the transformers side failed: " << failed;

  torch::NoGradGuard no_grad;
  model->eval();
  auto hf = checkpoint::SafetensorsFile::open(d + "/ours_in_transformers.safetensors")->load("logits");
  auto mine = model->forward(ids);
  EXPECT_TRUE(torch::allclose(mine, hf, 1e-4, 1e-4)) << "max difference " << (mine - hf).abs().max().item<double>();

  auto loaded = load_pretrained(d + "/theirs");
  EXPECT_TRUE(loaded.report.clean()) << loaded.report.describe();
  EXPECT_EQ(loaded.config.num_local_experts, 4);
  EXPECT_EQ(loaded.config.num_experts_per_tok, 2);
  EXPECT_DOUBLE_EQ(loaded.config.router_aux_loss_coef, 0.02);
  auto theirs = checkpoint::SafetensorsFile::open(d + "/theirs_logits.safetensors");
  loaded.model->eval();
  auto got = loaded.model->forward(theirs->load("ids"));
  auto want = theirs->load("logits");
  EXPECT_TRUE(torch::allclose(got, want, 1e-4, 1e-4)) << "max difference " << (got - want).abs().max().item<double>();
  const double aux = loaded.model->router_losses().load_balancing_loss().item<double>();
  EXPECT_NEAR(aux, theirs->load("aux").item<double>(), 1e-5) << "load-balancing loss";
}

// Activation checkpointing recomputes each layer's attention half in backward; the MoE half runs
// once, so the routing the auxiliary losses see has its graph: the same loss and gradients.
TEST(Mixtral, GradientCheckpointingGivesTheSameGradients) {
  auto grads = [](bool checkpointing) {
    torch::manual_seed(3);
    LlamaForCausalLM model(tiny_mixtral());
    model->set_gradient_checkpointing(checkpointing);
    auto ids = torch::randint(tiny_mixtral().vocab_size, {2, 12}, torch::make_generator<at::CPUGeneratorImpl>(4));
    auto loss = model->loss(ids, ids);
    loss.backward();
    std::map<std::string, torch::Tensor> out{{"loss", loss.detach()}};
    for (const auto& p : model->named_parameters()) out[p.key()] = p.value().grad().clone();
    return out;
  };
  const auto plain = grads(false), checkpointed = grads(true);
  ASSERT_EQ(plain.size(), checkpointed.size());
  for (const auto& [name, g] : plain)
    EXPECT_TRUE(torch::allclose(checkpointed.at(name), g, 1e-5, 1e-7)) << name;
  EXPECT_GT(plain.at("model.layers.0.block_sparse_moe.gate.weight").abs().sum().item<double>(), 0)
      << "the router learns (through the combine weights and the auxiliary losses)";
}

TEST(Mixtral, InvalidSettingsAreNamed) {
  auto msg = [](LlamaConfig c, ParallelSplit s) {
    return testing::error_message_of([&] {
      c.validate();
      check_parallel(c, s);
    });
  };
  auto c = tiny_mixtral();
  c.num_local_experts = 6;
  EXPECT_NE(msg(c, {.ep = 4}).find("num_local_experts 6 does not divide by ep 4"), std::string::npos);
  c = tiny_mixtral();
  c.num_experts_per_tok = 5;
  EXPECT_NE(msg(c, {}).find("num_experts_per_tok must be in 1..num_local_experts (4), got 5"), std::string::npos);
  EXPECT_NE(msg(tiny_test_llama(), {.ep = 2}).find("ep 2: the model has no experts"), std::string::npos);
  EXPECT_NE(msg(tiny_mixtral(), {.tp = 2, .sp = 2, .sp_mode = dist::SequenceParallelMode::kSplitGather})
                .find("split_gather with experts"),
            std::string::npos);
  auto layout = testing::error_message_of([] { dist::ParallelDims d({.ep = 4}, 2); });
  EXPECT_NE(layout.find("ep 4 does not divide dp 2"), std::string::npos) << layout;
  auto json = testing::error_message_of(
      [] { LlamaConfig::from_json_text(R"({"model_type": "mixtral", "num_local_experts": 0})", "'x.json'"); });
  EXPECT_NE(json.find("'x.json': model_type \"mixtral\" needs num_local_experts > 0"), std::string::npos) << json;
}

// ---- expert parallelism against one process ----

constexpr int64_t kBatch = 8, kSeq = 16, kSteps = 2;
constexpr double kClip = 0.5;

torch::Tensor global_batches() {
  auto g = torch::make_generator<at::CPUGeneratorImpl>(21);
  return torch::randint(tiny_mixtral().vocab_size, {kSteps, kBatch, kSeq}, g, torch::kInt64);
}

// SGD with momentum and weight decay: the update is linear in the gradient, so parameters after
// two steps stay as close to one process as the gradients are. (AdamW divides each element by its
// own running magnitude: elements with gradients near zero, an expert few tokens reached, turn
// the 1e-10 noise of another summation order under tp into moves of ~1e-6.)
std::shared_ptr<torch::optim::SGD> optimizer_for(LlamaForCausalLM& model) {
  return std::make_shared<torch::optim::SGD>(model->parameters(),
                                             torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(0.01));
}

struct Run {
  std::vector<double> losses, norms;
  std::vector<int64_t> dropped;                // step 0, per replica
  std::map<std::string, torch::Tensor> grads;  // step 0, before clipping
  std::map<std::string, torch::Tensor> params; // after the last step
};

// One process takes each replica's samples as its own forward (the auxiliary loss is a statistic
// of one forward's tokens, as in Hugging Face and on every data-parallel rank) and averages.
Run reference(const LlamaConfig& c, int replicas) {
  torch::manual_seed(5);
  LlamaForCausalLM model(c);
  auto optimizer = optimizer_for(model);
  auto& opt = *optimizer;
  auto data = global_batches();
  Run run;
  const int64_t per = kBatch / replicas;
  for (int s = 0; s < kSteps; ++s) {
    opt.zero_grad();
    double loss = 0;
    for (int r = 0; r < replicas; ++r) {
      auto mine = data[s].narrow(0, r * per, per);
      auto l = model->loss(mine, mine) / replicas;
      l.backward();
      loss += l.item<double>();
      if (s == 0) run.dropped.push_back(model->router_losses().dropped());
    }
    if (s == 0)
      for (const auto& p : model->named_parameters()) run.grads[p.key()] = p.value().grad().clone();
    run.norms.push_back(torch::nn::utils::clip_grad_norm_(model->parameters(), kClip));
    opt.step();
    run.losses.push_back(loss);
  }
  for (const auto& p : model->named_parameters()) run.params[p.key()] = p.value().detach().clone();
  return run;
}

booster::PluginConfig opts(int ep, int tp = 1, int zero_stage = 0) {
  booster::PluginConfig o;
  o.name = "hybrid";
  o.device = "cpu";
  o.layout.ep = ep;
  o.layout.tp = tp;
  o.options["zero_stage"] = zero_stage;
  return o;
}

Run expert_parallel(const LlamaConfig& c, const booster::PluginConfig& o) {
  auto plugin = booster::make_plugin(o);
  check_parallel(c, plugin->dims(), kSeq);
  torch::manual_seed(5);
  LlamaForCausalLM model(c, parallel::ParallelContext::from(plugin->dims()));
  auto opt = optimizer_for(model);
  booster::Booster booster(plugin);
  auto b = booster.boost(model.ptr(), opt);
  auto [dp_rank, dp] = plugin->data_parallel_rank_and_size();
  auto data = global_batches();
  Run run;
  for (int s = 0; s < kSteps; ++s) {
    b.optimizer->zero_grad();
    auto mine = data[s].narrow(0, dp_rank * (kBatch / dp), kBatch / dp);
    auto loss = model->loss(mine, mine);
    booster.backward(loss, *b.optimizer);
    if (s == 0) {
      auto dropped = torch::zeros({dp}, torch::kInt64);
      dropped[dp_rank] = model->router_losses().dropped();
      dist::all_reduce(dropped, plugin->dims().group(dist::Axis::kDp));
      for (int r = 0; r < dp; ++r) run.dropped.push_back(dropped[r].item<int64_t>());
      for (auto& [name, g] : b.optimizer->model_wrapper().checkpoint().full_gradients(*model)) run.grads[name] = g;
    }
    run.norms.push_back(booster.clip_grad_norm(*b.optimizer, kClip));
    b.optimizer->step();
    auto l = torch::tensor({loss.item<double>()}, torch::kFloat64);
    dist::all_reduce(l, dist::world_group(), dist::ReduceOp::kAvg);  // equal tokens per replica
    run.losses.push_back(l.item<double>());
  }
  for (auto& [name, t] : b.optimizer->model_wrapper().checkpoint().model_state_to_save(*model)) run.params[name] = t.clone();
  return run;
}

void expect_close(const std::map<std::string, torch::Tensor>& want, const std::map<std::string, torch::Tensor>& got,
                  const std::string& what) {
  EXPECT_EQ(got.size(), want.size()) << what;
  for (const auto& [name, w] : want) {
    auto it = got.find(name);
    ASSERT_NE(it, got.end()) << what << ": " << name << " missing";
    ASSERT_EQ(it->second.sizes(), w.sizes()) << what << ": " << name;
    EXPECT_LE((it->second - w).abs().max().item<double>(), 1e-5 * w.abs().max().item<double>() + 1e-7)
        << what << ": " << name;
  }
}

void expect_same(const Run& want, const Run& got, const std::string& what, bool compare_drops = true) {
  ASSERT_EQ(got.losses.size(), want.losses.size()) << what;
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_NEAR(got.losses[s], want.losses[s], 1e-5 * std::abs(want.losses[s])) << what << " loss, step " << s;
    EXPECT_NEAR(got.norms[s], want.norms[s], 1e-5 * std::abs(want.norms[s])) << what << " norm, step " << s;
  }
  if (compare_drops) EXPECT_EQ(got.dropped, want.dropped) << what << ": tokens dropped per replica";
  if (dist::rank() != 0) return;  // the first rank holds every gathered tensor
  expect_close(want.grads, got.grads, what + " gradient");
  expect_close(want.params, got.params, what + " parameter after two steps");
}

TEST(MixtralExpertParallel, ExpertParallelMatchesOneProcess) {
  testing::run_ranks(4, [] {
    const auto c = tiny_mixtral();
    const auto want = reference(c, 4);
    expect_same(want, expert_parallel(c, opts(2)), "ep 2 x edp 2");
    expect_same(want, expert_parallel(c, opts(4)), "ep 4");
    // ZeRO: dense parameters sharded over the 4 replicas, experts over the 2 holding the same ones.
    expect_same(want, expert_parallel(c, opts(2, 1, 1)), "ep 2 x edp 2, ZeRO-1");
    expect_same(want, expert_parallel(c, opts(2, 1, 2)), "ep 2 x edp 2, ZeRO-2");
    auto dropping = c;
    dropping.capacity_factor = 0.5;  // drops in every replica
    const auto want_dropping = reference(dropping, 4);
    for (auto n : want_dropping.dropped) EXPECT_GT(n, 0);
    expect_same(want_dropping, expert_parallel(dropping, opts(4)), "ep 4, capacity factor 0.5");
  }, {.world_size = 4, .deadline_s = 240});
}

TEST(MixtralExpertParallel, ExpertTimesTensorParallelMatchesOneProcess) {
  testing::run_ranks(4, [] {
    const auto c = tiny_mixtral();
    expect_same(reference(c, 2), expert_parallel(c, opts(2, 2)), "ep 2 x tp 2");
  }, {.world_size = 4, .deadline_s = 240});
}

// pp 2 x ep 2 (dp 2), two microbatches per replica: the stages pass the routing statistics on
// with the activations, so the load-balancing loss still pools both layers of each microbatch, as
// one process taking each microbatch as its own forward does.
Run expert_pipeline(const LlamaConfig& c, const char* schedule) {
  auto o = opts(2);
  o.layout.pp = 2;
  o.options["pp_schedule"] = schedule;
  o.options["num_microbatches"] = 2;
  auto plugin = booster::make_plugin(o);
  check_parallel(c, plugin->dims(), kSeq);
  torch::manual_seed(5);
  LlamaForCausalLM model(c, plugin->parallel_context());
  auto opt = optimizer_for(model);
  booster::Booster booster(plugin);
  auto b = booster.boost(model.ptr(), opt);
  const auto stage = stage_functions(model);
  auto [dp_rank, dp] = plugin->data_parallel_rank_and_size();
  auto data = global_batches();
  Run run;
  for (int s = 0; s < kSteps; ++s) {
    b.optimizer->zero_grad();
    auto micro = data[s].narrow(0, dp_rank * (kBatch / dp), kBatch / dp).split(kBatch / dp / 2);
    const double loss = booster.execute_pipeline(*b.optimizer, stage, micro, micro);
    if (s == 0)
      for (auto& [name, g] : b.optimizer->model_wrapper().checkpoint().full_gradients(*model)) run.grads[name] = g;
    run.norms.push_back(booster.clip_grad_norm(*b.optimizer, kClip));
    b.optimizer->step();
    auto l = torch::tensor({loss}, torch::kFloat64);
    dist::all_reduce(l, dist::world_group(), dist::ReduceOp::kAvg);  // every rank has its replica's
    run.losses.push_back(l.item<double>());
  }
  for (auto& [name, t] : b.optimizer->model_wrapper().checkpoint().model_state_to_save(*model)) run.params[name] = t.clone();
  return run;
}

TEST(MixtralExpertParallel, ExpertTimesPipelineParallelMatchesOneProcess) {
  testing::run_ranks(4, [] {
    const auto c = tiny_mixtral();
    const auto want = reference(c, 4);  // 2 replicas x 2 microbatches, in sample order
    expect_same(want, expert_pipeline(c, "1f1b"), "pp 2 x ep 2, 1f1b", /*compare_drops=*/false);
    expect_same(want, expert_pipeline(c, "zbh1"), "pp 2 x ep 2, zbh1", /*compare_drops=*/false);
  }, {.world_size = 4, .deadline_s = 240});
}

// Saved at ep 4, resumed at ep 2 (and read by one process): the checkpoint is the one Hugging
// Face layout, optimizer state found by name.
TEST(MixtralExpertParallel, CheckpointResumesAtAnotherExpertParallelSize) {
  const int owner = testing::is_rank_process() ? ::getppid() : ::getpid();
  const std::string dir = ::testing::TempDir() + "moe_ckpt_" + std::to_string(owner);
  testing::run_ranks(4, [dir] {
    const auto c = tiny_mixtral();
    auto data = global_batches();
    auto step = [&](booster::Booster& booster, booster::Boosted& b, LlamaForCausalLM& model, int s, int dp_rank) {
      b.optimizer->zero_grad();
      auto mine = data[s].narrow(0, dp_rank * 2, 2);
      auto loss = model->loss(mine, mine);
      booster.backward(loss, *b.optimizer);
      b.optimizer->step();
      auto l = torch::tensor({loss.item<double>()}, torch::kFloat64);
      dist::all_reduce(l, dist::world_group(), dist::ReduceOp::kAvg);
      return l.item<double>();
    };
    auto p1 = booster::make_plugin(opts(4));
    torch::manual_seed(5);
    LlamaForCausalLM m1(c, parallel::ParallelContext::from(p1->dims()));
    booster::Booster b1(p1);
    auto s1 = b1.boost(m1.ptr(), std::make_shared<torch::optim::AdamW>(m1->parameters(), torch::optim::AdamWOptions(1e-2)));
    const int dp_rank = p1->data_parallel_rank_and_size().first;
    step(b1, s1, m1, 0, dp_rank);
    b1.save_checkpoint(s1, dir, {.step = 1, .epoch = 0});
    const double straight = step(b1, s1, m1, 1, dp_rank);

    auto p2 = booster::make_plugin(opts(2));
    torch::manual_seed(99);
    LlamaForCausalLM m2(c, parallel::ParallelContext::from(p2->dims()));
    EXPECT_EQ(m2->model->layers[0]->block_sparse_moe->experts.size(), 2u);
    booster::Booster b2(p2);
    auto s2 = b2.boost(m2.ptr(), std::make_shared<torch::optim::AdamW>(m2->parameters(), torch::optim::AdamWOptions(1e-2)));
    EXPECT_EQ(b2.load_checkpoint(s2, dir).step, 1);
    EXPECT_NEAR(step(b2, s2, m2, 1, p2->data_parallel_rank_and_size().first), straight, 1e-6 * std::abs(straight));
    if (dist::rank() == 0) {
      LlamaForCausalLM whole(c);
      auto report = checkpoint::load_model_state(*whole, dir + "/step-1/model");
      EXPECT_TRUE(report.clean()) << report.describe();
    }
  }, {.world_size = 4, .deadline_s = 240});
}

}  // namespace moe_test
}  // namespace colossal::llama
