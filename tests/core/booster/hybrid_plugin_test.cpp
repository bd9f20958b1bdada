// The hybrid plugin on real ranks with a toy transformer (tests/support/toy_transformer.h)
// against one process with the same seed and the same global batch: losses of 3 AdamW steps with
// gradient clipping, the clipped norm, and every gradient gathered whole, within relative 1e-5
// (fp32) — tp x dp under DDP, ZeRO-1 and ZeRO-2. A checkpoint it saves resumes at another
// tensor-parallel size; a model built without the layout's groups and bad options are refused.
// (LLaMA's own uses — sequence parallelism, pipelines, experts — are tested in tests/llama.)
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include "core/booster/booster.h"
#include "core/booster/registry.h"
#include "core/checkpoint/model_io.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/parallel/tensor/shard.h"
#include "tests/support/errors.h"
#include "tests/support/multirank.h"
#include "tests/support/toy_transformer.h"

namespace colossal::testing {
namespace {

using booster::PluginConfig;

constexpr int64_t kBatch = 4, kSeq = 12, kSteps = 3;
constexpr double kClip = 0.5;  // below the first steps' norms: clipping takes effect

torch::Tensor global_batches() {
  auto g = torch::make_generator<at::CPUGeneratorImpl>(21);
  return torch::randint(ToyTransformerShape{}.vocab, {kSteps, kBatch, kSeq}, g, torch::kInt64);
}

struct Run {
  std::vector<double> losses, norms;
  std::map<std::string, torch::Tensor> grads;  // first step, whole, after clipping
};

Run reference() {
  torch::manual_seed(5);
  ToyTransformer model;
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
  auto data = global_batches();
  Run run;
  for (int s = 0; s < kSteps; ++s) {
    opt.zero_grad();
    auto loss = model->loss(data[s]);
    loss.backward();
    run.norms.push_back(torch::nn::utils::clip_grad_norm_(model->parameters(), kClip));
    if (s == 0)
      for (const auto& p : model->named_parameters()) run.grads[p.key()] = p.value().grad().clone();
    opt.step();
    run.losses.push_back(loss.item<double>());
  }
  return run;
}

// The plugin as an application builds it: through the registry.
PluginConfig hybrid_config(int tp, int zero_stage) {
  PluginConfig o;
  o.name = "hybrid";
  o.device = "cpu";
  o.layout.tp = tp;
  o.options["zero_stage"] = zero_stage;
  return o;
}

double mean_over_ranks(double v) {
  auto t = torch::tensor({v}, torch::kFloat64);
  dist::all_reduce(t, dist::world_group(), dist::ReduceOp::kAvg);  // equal tokens per replica
  return t.item<double>();
}

Run hybrid(const PluginConfig& config) {
  auto plugin = booster::make_plugin(config);
  torch::manual_seed(5);
  ToyTransformer model(ToyTransformerShape{}, parallel::ParallelContext::from(plugin->dims()));
  auto opt = std::make_shared<torch::optim::AdamW>(model->parameters(), torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
  booster::Booster booster(plugin);
  auto b = booster.boost(model.ptr(), opt);
  auto [dp_rank, dp] = plugin->data_parallel_rank_and_size();
  auto data = global_batches();
  Run run;
  for (int s = 0; s < kSteps; ++s) {
    b.optimizer->zero_grad();
    auto mine = data[s].narrow(0, dp_rank * (kBatch / dp), kBatch / dp);  // this replica's samples
    auto loss = model->loss(mine);
    booster.backward(loss, *b.optimizer);
    run.norms.push_back(booster.clip_grad_norm(*b.optimizer, kClip));
    // Whole gradients as the checkpoint layout assembles them (ZeRO's live in its shards).
    if (s == 0)
      for (auto& [name, g] : b.optimizer->model_wrapper().checkpoint().full_gradients(*model)) run.grads[name] = g;
    b.optimizer->step();
    run.losses.push_back(mean_over_ranks(loss.item<double>()));
  }
  return run;
}

void expect_same(const Run& want, const Run& got, const std::string& what) {
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_NEAR(got.losses[s], want.losses[s], 1e-5 * std::abs(want.losses[s])) << what << " loss, step " << s;
    EXPECT_NEAR(got.norms[s], want.norms[s], 1e-5 * std::abs(want.norms[s])) << what << " norm, step " << s;
  }
  EXPECT_EQ(got.grads.size(), want.grads.size()) << what;
  for (const auto& [name, g] : got.grads) {
    ASSERT_TRUE(want.grads.count(name)) << what << ": unexpected gradient " << name;
    const auto& w = want.grads.at(name);
    ASSERT_EQ(g.sizes(), w.sizes()) << what << ": " << name;
    EXPECT_LE((g - w).abs().max().item<double>(), 1e-5 * w.abs().max().item<double>() + 1e-7)
        << what << ": gradient of " << name;
  }
}

TEST(HybridParallelPlugin, TensorTimesDataParallelMatchesOneProcess) {
  testing::run_ranks(4, [] {
    auto want = reference();
    expect_same(want, hybrid(hybrid_config(2, 0)), "tp 2 x dp 2, DDP");
    expect_same(want, hybrid(hybrid_config(2, 1)), "tp 2 x dp 2, ZeRO-1");
    expect_same(want, hybrid(hybrid_config(2, 2)), "tp 2 x dp 2, ZeRO-2");
    auto offloaded = hybrid_config(2, 2);
    offloaded.options["cpu_offload"] = true;  // ZeRO's own option, under the same name
    expect_same(want, hybrid(offloaded), "tp 2 x dp 2, ZeRO-2 with cpu_offload");
    expect_same(want, hybrid(hybrid_config(4, 0)), "tp 4");
  });
}

// Saved at tp 2 x dp 2 under ZeRO-2 (each rank's optimizer state a dp slice of its tp part), the
// run resumes at the same layout, at tp 4 and at tp 1 (ZeRO-2 over 4 ranks): the optimizer state
// is reassembled for each, so two more steps land where two straight steps do (the second step's
// loss depends on the restored moments).
TEST(HybridParallelPlugin, CheckpointResumesAtAnyTensorParallelSize) {
  const int owner = testing::is_rank_process() ? ::getppid() : ::getpid();
  const std::string dir = ::testing::TempDir() + "core_hybrid_ckpt_" + std::to_string(owner);
  testing::run_ranks(4, [dir] {
    auto data = global_batches();
    struct Trained {
      std::shared_ptr<booster::Plugin> plugin;
      ToyTransformer model{nullptr};
      std::unique_ptr<booster::Booster> booster;
      booster::Boosted b;
      double step(const torch::Tensor& batch) {
        auto [dp_rank, dp] = plugin->data_parallel_rank_and_size();
        b.optimizer->zero_grad();
        auto mine = batch.narrow(0, dp_rank * (kBatch / dp), kBatch / dp);
        auto loss = model->loss(mine);
        booster->backward(loss, *b.optimizer);
        b.optimizer->step();
        return mean_over_ranks(loss.item<double>());
      }
    };
    auto build = [](const PluginConfig& c, int seed) {
      Trained t;
      t.plugin = booster::make_plugin(c);
      torch::manual_seed(seed);
      t.model = ToyTransformer(ToyTransformerShape{}, parallel::ParallelContext::from(t.plugin->dims()));
      t.booster = std::make_unique<booster::Booster>(t.plugin);
      t.b = t.booster->boost(t.model.ptr(), std::make_shared<torch::optim::AdamW>(t.model->parameters(),
                                                                                  torch::optim::AdamWOptions(1e-2)));
      return t;
    };
    auto straight = build(hybrid_config(2, 2), 5);
    straight.step(data[0]);
    straight.step(data[1]);
    straight.booster->save_checkpoint(straight.b, dir, {.step = 2, .epoch = 0});
    const double third = straight.step(data[2]), fourth = straight.step(data[2]);
    PluginConfig zero2;
    zero2.name = "zero2";
    zero2.device = "cpu";
    for (const auto& [what, config] : std::vector<std::pair<std::string, PluginConfig>>{
             {"tp 2 x dp 2, ZeRO-2", hybrid_config(2, 2)}, {"tp 4, DDP", hybrid_config(4, 0)}, {"tp 1, ZeRO-2 over 4", zero2}}) {
      auto t = build(config, 99);  // other weights: everything comes from the checkpoint
      EXPECT_EQ(t.booster->load_checkpoint(t.b, dir).step, 2) << what;
      EXPECT_NEAR(t.step(data[2]), third, 1e-6 * std::abs(third)) << what << ": the step after the resume";
      EXPECT_NEAR(t.step(data[2]), fourth, 1e-5 * std::abs(fourth)) << what << ": the loss after the restored moments' step";
    }
    // The saved model holds whole tensors: a single process reads it.
    if (dist::rank() == 0) {
      ToyTransformer whole;
      auto report = checkpoint::load_model_state(*whole, dir + "/step-2/model");
      EXPECT_TRUE(report.clean()) << report.describe();
    }
  });
}

TEST(HybridParallelPlugin, ModelBuiltWithoutItsGroupsIsRefused) {
  testing::run_ranks(2, [] {
    auto plugin = booster::make_plugin(hybrid_config(2, 0));
    ToyTransformer model;  // not built with the layout's groups
    booster::Booster booster(plugin);
    auto opt = std::make_shared<torch::optim::AdamW>(model->parameters(), torch::optim::AdamWOptions(1e-2));
    auto msg = testing::error_message_of([&] { booster.boost(model.ptr(), opt); });
    EXPECT_NE(msg.find("the model holds no tensor-parallel slices"), std::string::npos) << msg;
  });
}

// Without a pipeline axis the pipeline step is refused with the plugin's name and what to do.
TEST(HybridParallelPlugin, PipelineStepWithoutStagesIsNamed) {
  testing::run_ranks(2, [] {
    auto plugin = booster::make_plugin(hybrid_config(2, 0));
    ToyTransformer model(ToyTransformerShape{}, parallel::ParallelContext::from(plugin->dims()));
    booster::Booster booster(plugin);
    auto b = booster.boost(model.ptr(), std::make_shared<torch::optim::AdamW>(model->parameters()));
    auto msg = testing::error_message_of([&] { booster.execute_pipeline(*b.optimizer, {}, {}, {}); });
    EXPECT_NE(msg.find("plugin 'hybrid' runs no pipeline (pp = 1)"), std::string::npos) << msg;
  });
}

TEST(HybridParallelPlugin, ItsOwnOptionsAreCheckedByTheRegistry) {
  testing::run_ranks(1, [] {
    auto msg = [](PluginConfig c) { return testing::error_message_of([&] { booster::make_plugin(c); }); };
    auto has = [](const std::string& m, const std::string& part) {
      EXPECT_NE(m.find(part), std::string::npos) << "expected '" << part << "' in: " << m;
    };
    has(msg(hybrid_config(1, 3)), "zero_stage: expected 0, 1 or 2, got 3");
    auto offload_ddp = hybrid_config(1, 0);
    offload_ddp.options["cpu_offload"] = true;
    has(msg(offload_ddp), "cpu_offload is ZeRO's (zero_stage 1 or 2)");
    auto unused_zero = hybrid_config(1, 2);
    unused_zero.options["find_unused_parameters"] = true;
    has(msg(unused_zero), "find_unused_parameters is DDP's (zero_stage 0)");
  });
}

// DDP's own options reach the wrapper the hybrid plugin builds: a parameter that gets no gradient
// stops the step by name, unless find_unused_parameters allows it.
TEST(HybridParallelPlugin, DataParallelOptionsReachTheWrapper) {
  testing::run_ranks(2, [] {
    for (bool allow : {false, true}) {
      auto config = hybrid_config(1, 0);
      config.options["find_unused_parameters"] = allow;
      auto plugin = booster::make_plugin(config);
      ToyTransformer model(ToyTransformerShape{}, parallel::ParallelContext::from(plugin->dims()));
      model->register_module("unused", torch::nn::Linear(4, 4));  // never in the loss
      booster::Booster booster(plugin);
      auto b = booster.boost(model.ptr(), std::make_shared<torch::optim::AdamW>(model->parameters()));
      auto ids = global_batches()[0].narrow(0, dist::rank() * 2, 2);
      b.optimizer->zero_grad();
      auto step = [&] { booster.backward(model->loss(ids), *b.optimizer); };
      if (allow) {
        EXPECT_NO_THROW(step());
      } else {
        auto m = testing::error_message_of(step);
        EXPECT_NE(m.find("got no gradient in this step: unused."), std::string::npos) << m;
      }
    }
  });
}

}  // namespace
}  // namespace colossal::testing
