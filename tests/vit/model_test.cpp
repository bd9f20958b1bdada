// ViT in the Hugging Face layout, checked by `transformers` itself: a random ViT made by
// transformers loads here and gives its logits (at the configured image size and, with position
// embeddings interpolated, a larger one); a ViT we save opens in transformers with our logits.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <fstream>

#include "core/checkpoint/safetensors.h"
#include "vit/pretrained.h"

namespace colossal::vit {
namespace {

const char* kScript = R"PY(
import sys, torch
from safetensors.torch import load_file, save_file
from transformers import ViTConfig, ViTForImageClassification
d = sys.argv[1]
cfg = ViTConfig(image_size=32, patch_size=8, num_channels=3, hidden_size=48, num_hidden_layers=2,
                num_attention_heads=4, intermediate_size=96, num_labels=10, hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0)
torch.manual_seed(0)
theirs = ViTForImageClassification(cfg).eval()
with torch.no_grad():
    for p in theirs.parameters():
        p.normal_(0, 0.2)
theirs.save_pretrained(d + "/theirs")
px = torch.randn(2, 3, 32, 32)
big = torch.randn(1, 3, 48, 48)
ours = ViTForImageClassification.from_pretrained(d + "/ours").eval()
ours_px = load_file(d + "/ours_px.safetensors")["px"]
with torch.no_grad():
    save_file({"px": px, "logits": theirs(px).logits.contiguous(), "big": big,
               "big_logits": theirs(big, interpolate_pos_encoding=True).logits.contiguous(),
               "ours_logits": ours(ours_px).logits.contiguous()}, d + "/out.safetensors")
)PY";

// The count train_vit prints is the whole model's, whatever part a rank holds: it equals the
// parameters of a model built on one process, with and without q/k/v biases.
TEST(ViTModel, ConfigCountsEveryParameter) {
  for (bool bias : {true, false}) {
    auto c = ViTConfig::named("nano", 16, 4, 3, 5);
    c.qkv_bias = bias;
    ViTForImageClassification model(c);
    int64_t n = 0;
    for (const auto& p : model->parameters()) n += p.numel();
    EXPECT_EQ(c.num_parameters(), n) << "qkv_bias " << bias;
  }
}

TEST(ViTModel, HuggingFaceLayoutBothWays) {
  std::string d = ::testing::TempDir() + "vit_" + std::to_string(::getpid());
  (void)!std::system(("rm -rf '" + d + "' && mkdir -p '" + d + "'").c_str());
  ViTConfig c;
  c.image_size = 32, c.patch_size = 8, c.hidden_size = 48, c.num_hidden_layers = 2, c.num_attention_heads = 4;
  c.intermediate_size = 96, c.num_labels = 10;
  torch::manual_seed(1);
  ViTForImageClassification ours(c);
  {
    torch::NoGradGuard ng;
    for (auto& p : ours->parameters()) p.normal_(0, 0.2);
  }
  ours->eval();
  save_pretrained(c, checkpoint::model_state(*ours), d + "/ours");
  auto px = torch::randn({2, 3, 32, 32});
  checkpoint::save_safetensors(d + "/ours_px.safetensors", {{"px", px}});
  std::ofstream(d + "/check.py") << kScript;
  std::string cmd = std::string(COLOSSAL_TEST_PYTHON) + " " + d + "/check.py " + d + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;

  torch::NoGradGuard no_grad;
  auto out = checkpoint::SafetensorsFile::open(d + "/out.safetensors");
  auto mine = ours->forward(px);
  auto hf = out->load("ours_logits");
  EXPECT_TRUE(torch::allclose(mine, hf, 1e-4, 1e-4)) << "ours in transformers: " << (mine - hf).abs().max().item<float>();

  auto loaded = load_pretrained(d + "/theirs");
  loaded.model->eval();
  EXPECT_EQ(loaded.config.num_labels, 10);
  auto theirs_here = loaded.model->forward(out->load("px"));
  EXPECT_TRUE(torch::allclose(theirs_here, out->load("logits"), 1e-4, 1e-4))
      << "theirs here: " << (theirs_here - out->load("logits")).abs().max().item<float>();
  auto big_here = loaded.model->forward(out->load("big"));
  EXPECT_TRUE(torch::allclose(big_here, out->load("big_logits"), 1e-4, 1e-4))
      << "interpolated position embeddings: " << (big_here - out->load("big_logits")).abs().max().item<float>();
}

}  // namespace
}  // namespace colossal::vit
