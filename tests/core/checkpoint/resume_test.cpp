// Resuming: k steps, save, a new process group, load, N-k steps equals N steps straight
// (bitwise: same layout). And a rank dying during a save leaves `latest` at the previous
// checkpoint, which still loads.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <torch/torch.h>
#include <unistd.h>

#include <csignal>
#include <fstream>

#include "core/booster/booster.h"
#include "core/booster/plugins/low_level_zero/low_level_zero_plugin.h"
#include "core/booster/plugins/ddp/ddp_plugin.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "tests/support/errors.h"
#include "tests/support/multirank.h"

namespace colossal::booster {
namespace {

struct Run {
  torch::nn::Sequential model{nullptr};
  std::unique_ptr<Booster> booster;
  Boosted b;
  torch::Tensor data, target;
};

// A model with dropout (so the RNG matters), AdamW, a cosine schedule and a sampler.
Run make_run(uint64_t init_seed, const std::function<std::shared_ptr<Plugin>()>& plugin) {
  Run r;
  torch::manual_seed(init_seed);
  r.model = torch::nn::Sequential(torch::nn::Linear(6, 12), torch::nn::ReLU(),
                                  torch::nn::Dropout(0.3), torch::nn::Linear(12, 1));
  auto opt = std::make_shared<torch::optim::AdamW>(r.model->parameters(),
                                                   torch::optim::AdamWOptions(1e-2));
  auto sched = std::make_shared<optim::LRScheduler>(
      *opt, optim::LRScheduler::Options{.kind = "cosine", .warmup_steps = 2, .total_steps = 8});
  auto sampler = std::make_shared<data::DistributedSampler>(
      data::DistributedSampler::Options{.dataset_size = 64, .seed = 3});
  r.booster = std::make_unique<Booster>(plugin());
  r.b = r.booster->boost(r.model.ptr(), opt, sched, sampler);
  auto g = torch::make_generator<at::CPUGeneratorImpl>(77);
  r.data = at::randn({64, 6}, g);
  r.target = at::randn({64, 1}, g);
  return r;
}

std::vector<double> train(Run& r, int steps) {
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    auto idx = torch::tensor(r.b.sampler->next(4), torch::kInt64);
    r.b.optimizer->zero_grad();
    auto x = r.data.index_select(0, idx).to(r.b.compute_dtype);
    auto loss = torch::mse_loss(r.model->forward(x).to(torch::kFloat32), r.target.index_select(0, idx));
    r.booster->backward(loss, *r.b.optimizer);
    r.b.optimizer->step();
    r.b.lr_scheduler->step();
    auto l = loss.detach().to(torch::kFloat64).reshape({1});
    dist::all_reduce(l, dist::world_group());
    losses.push_back(l.item<double>());
  }
  return losses;
}

std::string root_dir(const std::string& name) {
  return ::testing::TempDir() + "resume_" + name + "_" + std::getenv("MASTER_PORT");
}

void check_resume(bool async, const std::string& name,
                  std::function<std::shared_ptr<Plugin>()> plugin) {
  testing::run_ranks(2, [async, name, plugin] {
    std::vector<double> straight;
    {
      auto r = make_run(1, plugin);
      straight = train(r, 6);
    }
    std::string root = root_dir(name + (async ? "_bitwise_async" : "_bitwise"));
    std::vector<double> resumed;
    {
      auto r = make_run(1, plugin);
      resumed = train(r, 1);
      for (int step = 2; step <= 3; ++step) {
        auto more = train(r, 1);
        resumed.insert(resumed.end(), more.begin(), more.end());
        r.booster->save_checkpoint(r.b, root, {.step = step}, {.keep_last = 1, .async = async});
      }
      if (async) {
        r.booster->wait_for_checkpoint();
        // Rank 0 holds the model and optimizer snapshot (replicated state is written once).
        if (dist::rank() == 0 && name == "ddp") {
          int64_t model_bytes = 0;
          for (const auto& p : r.model->parameters()) model_bytes += p.numel() * 4;
          EXPECT_GE(r.booster->last_snapshot_bytes(), 3 * model_bytes)
              << "parameters plus two moments, reported";
        }
      }
    }
    // A new process group, a differently initialised model: everything must come from disk.
    dist::shutdown();
    dist::init();
    auto r = make_run(999, plugin);
    auto state = r.booster->load_checkpoint(r.b, root);
    EXPECT_EQ(state.step, 3);
    auto more = train(r, 3);
    resumed.insert(resumed.end(), more.begin(), more.end());
    ASSERT_EQ(resumed.size(), straight.size());
    for (size_t i = 0; i < straight.size(); ++i) {
      EXPECT_EQ(resumed[i], straight[i]) << "step " << i << " (bitwise)";
    }
    if (dist::rank() == 0) {
      struct stat st {};
      EXPECT_NE(::stat((root + "/step-2").c_str(), &st), 0) << "keep_last = 1 removes step-2";
      EXPECT_EQ(::stat((root + "/step-3/model/model.safetensors").c_str(), &st), 0);
    }
  });
}

std::shared_ptr<Plugin> ddp() { return make_plugin("ddp"); }

TEST(Resume, SaveLoadInANewProcessGroupContinuesBitwise) { check_resume(false, "ddp", ddp); }
TEST(Resume, AsynchronousSaveResumesBitwiseToo) { check_resume(true, "ddp", ddp); }
TEST(Resume, ZeroStagesResumeBitwise) {
  // Sliced optimizer state (one file per rank); under bf16 the fp32 masters are gathered for the
  // model files and scattered back on load.
  check_resume(false, "zero1", [] { return make_plugin("zero1"); });
  check_resume(true, "zero2", [] { return make_plugin("zero2"); });
  check_resume(false, "zero2_bf16", [] {
    booster::LowLevelZeroPlugin::Options o;
    o.precision = "bf16";
    return std::make_shared<booster::LowLevelZeroPlugin>(o);
  });
}

TEST(Resume, RankDyingDuringSaveLeavesThePreviousCheckpoint) {
  if (testing::is_rank_process()) {
    dist::init();
    std::string root = root_dir("dying");
    auto r = make_run(1, [] { return make_plugin("zero2"); });
    train(r, 1);
    r.booster->save_checkpoint(r.b, root, {.step = 1});
    train(r, 1);
    if (dist::rank() == 1) ::raise(SIGKILL);  // gone in the middle of the next save
    try {
      r.booster->save_checkpoint(r.b, root, {.step = 2});
    } catch (const std::exception& e) {
      std::fprintf(stderr, "save failed as expected: %s\n", error_text(e).c_str());
    }
    std::ifstream latest(root + "/latest");
    std::string pointer;
    latest >> pointer;
    std::fprintf(stderr, "latest=%s\n", pointer.c_str());
    // The previous checkpoint is intact and loads into a fresh model (one process).
    auto fresh = torch::nn::Sequential(torch::nn::Linear(6, 12), torch::nn::ReLU(),
                                       torch::nn::Dropout(0.3), torch::nn::Linear(12, 1));
    auto report = checkpoint::load_model_state(*fresh, root + "/" + pointer + "/model");
    std::fprintf(stderr, "loaded=%d\n", report.clean() ? 1 : 0);
    std::fflush(stderr);
    ::_exit(pointer == "step-1" && report.clean() ? 3 : 4);
  }
  testing::RankLaunchOptions o;
  o.world_size = 2;
  o.env["COLOSSAL_DIST_TIMEOUT"] = "10";
  auto results = testing::launch_ranks(o);
  EXPECT_TRUE(results[1].killed_by(SIGKILL)) << results[1].describe();
  EXPECT_TRUE(results[0].exited_with(3)) << results[0].describe();
  EXPECT_NE(results[0].output.find("latest=step-1"), std::string::npos) << results[0].describe();
}

}  // namespace
}  // namespace colossal::booster
