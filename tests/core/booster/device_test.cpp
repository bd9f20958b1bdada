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
