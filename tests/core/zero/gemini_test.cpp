// ZeRO-3 (GeminiPlugin) against a single process on the global batch and against DDP: losses,
// gradient norms and parameters within relative 1e-5 (fp32); the chunk-size search; the state
// table; misuse named in errors.
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <torch/torch.h>

#include "core/booster/booster.h"
#include "core/booster/plugins/ddp/ddp_plugin.h"
#include "core/zero/chunk_search.h"
#include "core/zero/chunk_state.h"
#include "core/booster/plugins/gemini/gemini_plugin.h"
#include "tests/support/errors.h"
#include "tests/support/multirank.h"
#include "tests/support/toy_training.h"

namespace colossal::zero {
namespace {

using namespace colossal::testing;
using booster::GeminiPlugin;

// Chunks of 320 elements: fc1 (288 + 24) fills one, the norm and fc2 share the next, so
// chunks are gathered and released while the model runs.
GeminiPlugin::Options small_chunks() {
  GeminiPlugin::Options g;
  g.chunk_elements = 320;
  g.keep_gathered_below = 0;  // every parameter of this small model is "small"
  return g;
}

// Two steps of the sum of the outputs on a batch of ones.
template <class Boosted>
void step_twice(booster::Booster& booster, Boosted& b, ToyNet& model) {
  for (int step = 0; step < 2; ++step) {
    b.optimizer->zero_grad();
    booster.backward(model->forward(torch::ones({2, kIn})).sum(), *b.optimizer);
    b.optimizer->step();
  }
}

Trace train_gemini(const TrainOptions& o, GeminiPlugin::Options g) {
  return train_boosted(std::make_shared<GeminiPlugin>(g), o);
}

TEST(ChunkSearch, PicksTheSizeWithLeastPadding) {
  ChunkSearchOptions o;
  o.min_elements = 1;
  o.max_elements = 16;
  o.interval = 1;
  o.ranks = 2;
  // Three parameters of 5: chunks of 16 hold all three (1 element of padding); 10 holds two
  // (5 wasted in the second chunk); 6 wastes 1 per chunk (3).
  auto r = search_chunk_size({5, 5, 5}, o);
  EXPECT_EQ(r.chunk_elements, 16);
  EXPECT_EQ(r.chunks, 1);
  EXPECT_EQ(r.wasted_elements, 1);
  // 3+7 fills 10 exactly twice: no padding at all (and nothing larger does better).
  o.ranks = 1;
  o.max_elements = 12;
  r = search_chunk_size({3, 7, 3, 7}, o);
  EXPECT_EQ(r.chunk_elements, 10);
  EXPECT_EQ(r.wasted_elements, 0);
  // Never below the largest parameter, always a multiple of the ranks.
  o.ranks = 4;
  o.max_elements = 1;
  r = search_chunk_size({9, 2}, o);
  EXPECT_EQ(r.chunk_elements, 12);
  // A model smaller than the minimum gets one chunk of its own (rounded) size.
  r = search_chunk_size({5, 5, 5}, ChunkSearchOptions{.ranks = 2});
  EXPECT_EQ(r.chunk_elements, 16);
  EXPECT_EQ(r.chunks, 1);
}

TEST(ChunkState, IllegalTransitionsThrowWithStateNames) {
  EXPECT_TRUE(is_legal_transition(TensorState::kFree, TensorState::kHold));
  EXPECT_TRUE(is_legal_transition(TensorState::kCompute, TensorState::kReadyForReduce));
  auto msg = error_message_of([] { check_transition("fc1.weight", TensorState::kFree, TensorState::kCompute); });
  EXPECT_NE(msg.find("illegal state transition of 'fc1.weight': FREE -> COMPUTE"), std::string::npos) << msg;
  msg = error_message_of([] {
    check_transition("fc2.bias", TensorState::kReadyForReduce, TensorState::kFree);
  });
  EXPECT_NE(msg.find("READY_FOR_REDUCE -> FREE"), std::string::npos) << msg;
}

TEST(Gemini, TwoAndFourRanksMatchOneProcess) {
  for (int n : {2, 4}) {
    testing::run_ranks(n, [] {
      auto want = train_single({});
      expect_close(train_gemini({}, small_chunks()), want);
      expect_close(train_gemini({}, {}), want);  // searched chunk size: one chunk
    });
  }
}

TEST(Gemini, UnusedLayerAccumulationAndClippingMatchOneProcess) {
  testing::run_ranks(4, [] {
    TrainOptions unused;
    unused.unused_branch = true;
    unused.weight_decay = 0;
    expect_close(train_gemini(unused, small_chunks()), train_single(unused));
    TrainOptions accumulate;
    accumulate.micro_batches = 2;
    accumulate.accumulate_with_no_sync = false;  // every backward reduce-scatters and adds
    expect_close(train_gemini(accumulate, small_chunks()), train_single({}));
    TrainOptions clip;
    clip.clip = 0.05;
    auto want = train_single(clip);
    for (double n : want.norms) EXPECT_GT(n, clip.clip) << "the test must actually clip";
    expect_close(train_gemini(clip, small_chunks()), want);
  });
}

TEST(Gemini, PlacementsMatchOneProcess) {
  testing::run_ranks(2, [] {
    auto want = train_single({});
    auto pinned = small_chunks();
    pinned.shard_param_frac = 0.5;  // the second chunk stays gathered
    expect_close(train_gemini({}, pinned), want);
    auto offload = small_chunks();
    offload.offload_optim_frac = 1.0;  // separate fp32 masters for every chunk
    expect_close(train_gemini({}, offload), want);
    auto cached = small_chunks();
    cached.placement = "auto";
    cached.gathered_budget_bytes = 320 * 4;  // room for one chunk: every gather evicts
    expect_close(train_gemini({}, cached), want);
    auto no_prefetch = small_chunks();
    no_prefetch.prefetch = 0;
    no_prefetch.check_first_step = false;
    expect_close(train_gemini({}, no_prefetch), want);
  });
}

TEST(Gemini, ReleasedChunksHoldNoMemory) {
  testing::run_ranks(2, [] {
    auto model = make_model(7);
    auto opt = std::make_shared<torch::optim::AdamW>(model->parameters());
    booster::Booster booster(std::make_shared<GeminiPlugin>(small_chunks()));
    auto b = booster.boost(model.ptr(), opt);
    step_twice(booster, b, model);
    for (const auto& p : model->parameters())
      EXPECT_EQ(p.storage().nbytes(), 0u) << "between steps no chunk is gathered";
    int64_t held = 0, total = 0;
    for (const auto& p : model->parameters()) total += p.numel();
    for (const auto& g : opt->param_groups())
      for (const auto& p : g.params()) held += p.numel();
    auto t = torch::tensor({held}, torch::kInt64);
    dist::all_reduce(t, dist::world_group());
    EXPECT_EQ(t.item<int64_t>(), total) << "the masters cover every element exactly once";
  });
}

TEST(Gemini, FrozenParametersAreShardedGatheredForComputeAndNeverStepped) {
  // A LoRA run's base: frozen chunks of their own, sharded like the rest (each rank stores half),
  // released between steps, never reduced or stepped. fc2's input needs a gradient, so its chunk
  // is released in backward once that gradient is complete; fc1's is not, so it waits for the end.
  testing::run_ranks(2, [] {
    for (const char* frozen : {"fc1", "fc2"}) {
      TrainOptions o;
      o.frozen = frozen;
      auto want = train_single(o);
      expect_close(train_gemini(o, small_chunks()), want);
      auto offload = small_chunks();
      offload.offload_optim_frac = offload.offload_param_frac = 1.0;  // the frozen shard too
      expect_close(train_gemini(o, offload), want);
      auto cached = small_chunks();
      cached.placement = "auto";
      expect_close(train_gemini(o, cached), want);
    }
    TrainOptions o;
    o.frozen = "fc1";
    auto model = make_model(7);
    const auto before = model->fc1->weight.detach().clone();
    auto opt = std::make_shared<torch::optim::AdamW>(trainable(model, o));
    booster::Booster booster(std::make_shared<GeminiPlugin>(small_chunks()));
    auto b = booster.boost(model.ptr(), opt);
    step_twice(booster, b, model);
    for (const auto& p : model->parameters()) EXPECT_EQ(p.storage().nbytes(), 0u) << "no chunk gathered between steps";
    auto report = b.optimizer->model_wrapper().hooks().memory_report(*model, b.optimizer->inner());
    // fc1 (312 elements) and norm + fc2 (48 + 75) each in a chunk of 320: 160 + 160 per rank.
    EXPECT_EQ(report.bytes["parameters"]["host"], 2 * 160 * 4);
    EXPECT_EQ(report.bytes["gradients"]["host"], 160 * 4) << "gradient shards for the trainable chunk only";
    auto state = b.optimizer->model_wrapper().checkpoint().full_model_state(*model);
    std::map<std::string, torch::Tensor> by_name(state.begin(), state.end());
    EXPECT_TRUE(torch::equal(by_name.at("fc1.weight"), before)) << "the frozen weight is bitwise unchanged";
    EXPECT_EQ(b.optimizer->model_wrapper().checkpoint().full_model_state(*model, /*trainable_only=*/true).size(), 4u)
        << "norm and fc2: a LoRA checkpoint gathers no frozen chunk";
  });
}

TEST(Gemini, SmallParametersStayGatheredAndMatch) {
  testing::run_ranks(2, [] {
    auto g = small_chunks();
    g.keep_gathered_below = 100;  // biases and the norm (24 and 3 elements) stay gathered
    TrainOptions clip;
    clip.clip = 0.05;
    expect_close(train_gemini(clip, g), train_single(clip));
    auto model = make_model(7);
    auto opt = std::make_shared<torch::optim::AdamW>(model->parameters());
    booster::Booster booster(std::make_shared<GeminiPlugin>(g));
    auto b = booster.boost(model.ptr(), opt);
    step_twice(booster, b, model);
    for (const auto& item : model->named_parameters()) {
      bool small = item.value().numel() < 100;
      EXPECT_EQ(item.value().storage().nbytes() > 0, small) << item.key();
    }
  });
}

TEST(Gemini, MixedPrecisionMatchesDDPMixedPrecision) {
  testing::run_ranks(2, [] {
    booster::DDPPlugin::Options d;
    d.precision = "bf16";
    auto want = train_boosted(std::make_shared<booster::DDPPlugin>(d), {});
    auto g = small_chunks();
    g.precision = "bf16";
    auto got = train_gemini({}, g);
    for (size_t i = 0; i < want.losses.size(); ++i)
      EXPECT_NEAR(got.losses[i], want.losses[i], 2e-2 * std::abs(want.losses[i])) << "step " << i;
  });
}

// fc2 called directly instead of through colossal::nn::call.
struct BypassNetImpl : torch::nn::Module {
  BypassNetImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(kIn, kHidden));
    fc2 = register_module("fc2", torch::nn::Linear(kHidden, kOut));
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::relu(nn::call(fc1, x))); }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(BypassNet);

TEST(Gemini, ParameterUsedOutsideCallIsNamed) {
  testing::run_ranks(2, [] {
    BypassNet model;
    auto opt = std::make_shared<torch::optim::AdamW>(model->parameters());
    booster::Booster booster(std::make_shared<GeminiPlugin>(small_chunks()));
    auto b = booster.boost(model.ptr(), opt);
    auto msg = error_message_of([&] {
      booster.backward(model->forward(torch::ones({2, kIn})).sum(), *b.optimizer);
    });
    EXPECT_NE(msg.find("used without colossal::nn::call around their module"), std::string::npos) << msg;
    EXPECT_NE(msg.find("fc2.weight"), std::string::npos) << msg;
    EXPECT_EQ(msg.find("fc1.weight"), std::string::npos) << msg;
  });
}

TEST(Gemini, BadOptionsAreNamed) {
  auto msg = error_message_of([] {
    GeminiPlugin::Options g;
    g.placement = "dynamic";
    GeminiPlugin p(g);
  });
  EXPECT_NE(msg.find("placement: expected static or auto, got 'dynamic'"), std::string::npos) << msg;
  msg = error_message_of([] {
    GeminiPlugin::Options g;
    g.offload_device = "nvme";
    GeminiPlugin p(g);
  });
  EXPECT_NE(msg.find("needs nvme_dir"), std::string::npos) << msg;
}

}  // namespace
}  // namespace colossal::zero

namespace colossal::zero {
using booster::GeminiPlugin;
namespace {

std::string nvme_dir() {
  std::string dir = ::testing::TempDir() + "nvme_" + std::to_string(::getpid());
  ::mkdir(dir.c_str(), 0755);
  return dir;
}

TEST(GeminiNvme, OffloadedOptimizerEqualsInMemoryBitwise) {
  // The same fused AdamW kernel on both sides: in memory through FusedAdamW, streamed from
  // NVMe chunk by chunk. fp32: every parameter bitwise equal after 5 steps, with clipping.
  testing::run_ranks(2, [] {
    TrainOptions o;
    o.clip = 0.05;
    o.fused_adamw = true;
    auto in_memory = train_gemini(o, small_chunks());
    for (double param_frac : {0.0, 1.0}) {
      auto g = small_chunks();
      g.offload_device = "nvme";
      g.nvme_dir = nvme_dir();
      g.offload_optim_frac = 1.0;
      g.offload_param_frac = param_frac;
      auto offloaded = train_gemini(o, g);
      ASSERT_EQ(offloaded.params.size(), in_memory.params.size());
      for (size_t i = 0; i < in_memory.params.size(); ++i)
        EXPECT_TRUE(torch::equal(offloaded.params[i], in_memory.params[i]))
            << "parameter " << i << " (offload_param_frac " << param_frac << ")";
      for (size_t s = 0; s < in_memory.losses.size(); ++s)
        EXPECT_EQ(offloaded.losses[s], in_memory.losses[s]) << "step " << s;
    }
    // Nothing is left in the directory (the file is unlinked while open).
    std::string dir = nvme_dir();
    DIR* d = ::opendir(dir.c_str());
    int entries = 0;
    while (dirent* e = ::readdir(d)) entries += e->d_name[0] != '.';
    ::closedir(d);
    EXPECT_EQ(entries, 0);
  });
}

TEST(GeminiNvme, HalfOffloadedMatchesOneProcessAndReportsTiers) {
  testing::run_ranks(2, [] {
    auto g = small_chunks();
    g.offload_device = "nvme";
    g.nvme_dir = nvme_dir();
    g.offload_optim_frac = 0.5;
    g.offload_param_frac = 0.5;
    expect_close(train_gemini({}, g), train_single({}));

    auto model = make_model(7);
    auto opt = std::make_shared<torch::optim::AdamW>(model->parameters());
    booster::Booster booster(std::make_shared<GeminiPlugin>(g));
    auto b = booster.boost(model.ptr(), opt);
    b.optimizer->zero_grad();
    booster.backward(model->forward(torch::ones({2, kIn})).sum(), *b.optimizer);
    b.optimizer->step();
    auto report = b.optimizer->model_wrapper().hooks().memory_report(*model, *opt);
    EXPECT_GT(report.bytes["optimizer state"]["nvme"], 0) << report.format();
    // The in-memory chunk's elements may all sit in one rank's shard: count over ranks.
    auto host = torch::tensor({report.bytes["optimizer state"]["host"]}, torch::kInt64);
    dist::all_reduce(host, dist::world_group());
    EXPECT_GT(host.item<int64_t>(), 0) << report.format();
    EXPECT_GT(report.bytes["parameters"]["nvme"], 0) << report.format();
    EXPECT_GT(report.counters["nvme_bytes_read"], 0);
  });
}

TEST(GeminiNvme, ShardsOnNvmeAreReadAheadOfTheirGather) {
  // After the first step the recorded order prefetches: a shard on NVMe is read while the
  // modules before it run, and all-gathered at the next access. The result is the same (the
  // bitwise test above runs this path for 5 steps); here the read-ahead is seen to happen.
  testing::run_ranks(2, [] {
    auto g = small_chunks();
    g.offload_device = "nvme";
    g.nvme_dir = nvme_dir();
    g.offload_optim_frac = 1.0;
    g.offload_param_frac = 1.0;
    auto model = make_model(7);
    auto opt = std::make_shared<torch::optim::AdamW>(model->parameters());
    booster::Booster booster(std::make_shared<GeminiPlugin>(g));
    auto b = booster.boost(model.ptr(), opt);
    for (int step = 0; step < 3; ++step) {
      b.optimizer->zero_grad();
      booster.backward(model->forward(torch::ones({2, kIn})).sum(), *b.optimizer);
      b.optimizer->step();
    }
    auto report = b.optimizer->model_wrapper().hooks().memory_report(*model, *opt);
    EXPECT_GT(report.counters["nvme_prefetch_reads"], 0) << report.format();
    EXPECT_GT(report.counters["prefetches"], 0) << report.format();
  });
}

TEST(GeminiNvme, CheckpointOfOffloadedStateLoadsElsewhere) {
  testing::RankLaunchOptions launch;
  if (!testing::is_rank_process())
    launch.env["COLOSSAL_TEST_CKPT"] = ::testing::TempDir() + "nvme_ckpt_" + std::to_string(::getpid());
  // 2 steps under NVMe offload, save; 3 more under DDP must equal 5 straight steps.
  testing::run_ranks(2, [] {
    auto g = small_chunks();
    g.offload_device = "nvme";
    g.nvme_dir = nvme_dir();
    g.offload_optim_frac = 1.0;
    auto model = make_model(7);
    auto opt = std::make_shared<torch::optim::AdamW>(model->parameters(),
                                                     torch::optim::AdamWOptions(1e-2).weight_decay(0.01));
    booster::Booster booster(std::make_shared<GeminiPlugin>(g));
    auto b = booster.boost(model.ptr(), opt);
    auto [x, y] = make_data(5);
    int r = dist::rank();
    for (int s = 0; s < 2; ++s) {
      b.optimizer->zero_grad();
      booster.backward(torch::mse_loss(model->forward(x[s].narrow(0, r * 4, 4)), y[s].narrow(0, r * 4, 4)), *b.optimizer);
      b.optimizer->step();
    }
    booster.save_checkpoint(b, std::getenv("COLOSSAL_TEST_CKPT"), {.step = 2});
  }, launch);
  testing::run_ranks(2, [] {
    auto model = make_model(99);
    auto opt = std::make_shared<torch::optim::AdamW>(model->parameters(),
                                                     torch::optim::AdamWOptions(1e-2).weight_decay(0.01));
    booster::Booster booster(booster::make_plugin("ddp"));
    auto b = booster.boost(model.ptr(), opt);
    booster.load_checkpoint(b, std::getenv("COLOSSAL_TEST_CKPT"));
    auto [x, y] = make_data(5);
    int r = dist::rank();
    for (int s = 2; s < 5; ++s) {
      b.optimizer->zero_grad();
      booster.backward(torch::mse_loss(model->forward(x[s].narrow(0, r * 4, 4)), y[s].narrow(0, r * 4, 4)), *b.optimizer);
      b.optimizer->step();
    }
    auto want = train_single({});
    auto got = snapshot(model);
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(torch::allclose(got[i], want.params[i], 1e-5, 1e-7)) << "parameter " << i;
  }, launch);
}

TEST(GeminiNvme, UnwritableOrMissingDirectoryFailsBeforeTraining) {
  testing::run_ranks(1, [] {
    auto g = small_chunks();
    g.offload_device = "nvme";
    g.offload_optim_frac = 1.0;
    g.nvme_dir = "/nonexistent/offload";
    auto model = make_model(7);
    auto opt = std::make_shared<torch::optim::AdamW>(model->parameters());
    booster::Booster booster(std::make_shared<GeminiPlugin>(g));
    auto msg = error_message_of([&] { booster.boost(model.ptr(), opt); });
    EXPECT_NE(msg.find("nvme_dir '/nonexistent/offload' is not an existing directory"), std::string::npos) << msg;
    auto model2 = make_model(7);
    auto sgd = std::make_shared<torch::optim::SGD>(model2->parameters(), torch::optim::SGDOptions(0.1));
    g.nvme_dir = nvme_dir();
    booster::Booster booster2(std::make_shared<GeminiPlugin>(g));
    msg = error_message_of([&] { booster2.boost(model2.ptr(), sgd); });
    EXPECT_NE(msg.find("streams an AdamW step"), std::string::npos) << msg;
  });
}

}  // namespace
}  // namespace colossal::zero
