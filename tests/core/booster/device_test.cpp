// Plugins on a CUDA device, through the registry as an application builds them (--device cuda):
// DDP, ZeRO-2 and Gemini train the toy model on the GPU (NCCL as the backend of a CUDA build)
// and follow the CPU reference. Labelled `cuda`; where no GPU is visible the suite is reported
// as skipped, with the reason, never as passed.
#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include "core/booster/registry.h"
#include "tests/support/multirank.h"
#include "tests/support/toy_training.h"

namespace colossal::booster {
namespace {

TEST(CudaDevice, PluginsTrainOnTheGpuAsOnTheCpu) {
  if (!torch::cuda::is_available())
    GTEST_SKIP() << "needs a CUDA GPU and none is visible (scripts/gpu_check.sh runs this where one is lent)";
  testing::run_ranks(1, [] {
    at::globalContext().setAllowTF32CuBLAS(false);  // fp32 matmuls in fp32, as on the CPU
    const auto want = testing::train_single({});
    for (const char* name : {"ddp", "zero2", "gemini"}) {
      PluginConfig c;
      c.name = name;
      c.device = "cuda";
      auto plugin = make_plugin(c);
      ASSERT_TRUE(plugin->device().is_cuda()) << name;
      auto got = testing::train_boosted(plugin, {.device = plugin->device()});
      SCOPED_TRACE(name);
      // Another device sums in another order: relative 1e-4.
      testing::expect_close(got, want, 1e-4);
    }
  });
}

TEST(CudaDevice, Bf16StepsOnTheGpuFollowTheSameStepsOnTheCpu) {
  // Mixed precision (bf16 working weights, fp32 masters; FusedAdamW's kernel on each device):
  // DDP, ZeRO-2 and Gemini on the GPU against the same plugin on the CPU.
  if (!torch::cuda::is_available())
    GTEST_SKIP() << "needs a CUDA GPU and none is visible (scripts/gpu_check.sh runs this where one is lent)";
  testing::run_ranks(1, [] {
    at::globalContext().setAllowTF32CuBLAS(false);
    for (const char* name : {"ddp", "zero2", "gemini"}) {
      SCOPED_TRACE(name);
      auto run = [&](const char* device) {
        PluginConfig c;
        c.name = name;
        c.device = device;
        c.precision = "bf16";
        auto plugin = make_plugin(c);
        return testing::train_boosted(plugin, {.fused_adamw = true, .device = plugin->device()});
      };
      auto want = run("cpu");
      auto got = run("cuda");
      // bf16 compute on both, summed in different orders: bf16's resolution.
      testing::expect_close(got, want, 2e-2);
    }
  });
}

TEST(CudaDevice, GeminiTiersBelowTheGpuFollowTheCpu) {
  // Gemini's device tier: shards and optimizer state in pinned host memory (copies on a side
  // stream) or on NVMe, gathered chunks on the GPU. Each placement follows the CPU reference.
  if (!torch::cuda::is_available())
    GTEST_SKIP() << "needs a CUDA GPU and none is visible (scripts/gpu_check.sh runs this where one is lent)";
  testing::run_ranks(1, [] {
    at::globalContext().setAllowTF32CuBLAS(false);
    const auto want = testing::train_single({});
    const std::string dir = ::testing::TempDir();
    struct Placement {
      const char* device;
      const char* optim_frac;
      const char* param_frac;
    };
    for (const auto& p : {Placement{"cpu", "1", "0"}, Placement{"cpu", "1", "1"}, Placement{"nvme", "1", "1"}}) {
      SCOPED_TRACE(std::string(p.device) + " optim " + p.optim_frac + " param " + p.param_frac);
      PluginConfig c;
      c.name = "gemini";
      c.device = "cuda";
      c.set("offload_device", p.device, "test");
      c.set("offload_optim_frac", p.optim_frac, "test");
      c.set("offload_param_frac", p.param_frac, "test");
      c.set("chunk_elements", "320", "test");
      c.set("keep_gathered_below", "0", "test");
      if (std::string(p.device) == "nvme") c.set("nvme_dir", dir, "test");
      auto plugin = make_plugin(c);
      auto got = testing::train_boosted(plugin, {.device = plugin->device()});
      testing::expect_close(got, want, 1e-4);
    }
  });
}

TEST(PluginRegistry, AskingForCudaWithoutAGpuIsAClearError) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a GPU is visible: nothing to refuse";
  testing::run_ranks(1, [] {
    PluginConfig c;
    c.device = "cuda";
    std::string msg;
    try {
      make_plugin(c);
    } catch (const std::exception& e) {
      msg = e.what();
    }
    EXPECT_NE(msg.find("no CUDA GPU is visible"), std::string::npos) << msg;
    c.device = "auto";
    EXPECT_TRUE(make_plugin(c)->device().is_cpu());
  });
}

}  // namespace
}  // namespace colossal::booster
