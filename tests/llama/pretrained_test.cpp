// Hugging Face model directories both ways, checked by `transformers` itself: a directory we
// write opens with LlamaForCausalLM.from_pretrained and gives our logits; one transformers wrote
// (GQA, llama3 rope scaling) loads here and gives its logits.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cstdlib>

#include "core/checkpoint/safetensors.h"
#include "llama/pretrained.h"
#include "tests/support/errors.h"
#include "tests/support/python_check.h"

namespace colossal::llama {
namespace {

const char* kScript = R"PY(
import sys, torch
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig, LlamaForCausalLM
d = sys.argv[1]
ids = load_file(d + "/ids.safetensors")["ids"]
ours = LlamaForCausalLM.from_pretrained(d + "/ours", dtype=torch.float32).eval()
with torch.no_grad():
    save_file({"logits": ours(ids).logits.contiguous()}, d + "/ours_in_transformers.safetensors")
cfg = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=80, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                  rope_theta=500000.0, tie_word_embeddings=False,
                  rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                "high_freq_factor": 4.0, "original_max_position_embeddings": 8})
torch.manual_seed(0)
theirs = LlamaForCausalLM(cfg).eval()
with torch.no_grad():
    for p in theirs.parameters():
        p.normal_(0, 0.2)
theirs.save_pretrained(d + "/theirs")
ids2 = torch.randint(0, 96, (2, 12))
with torch.no_grad():
    save_file({"ids": ids2, "logits": theirs(ids2).logits.contiguous()}, d + "/theirs_logits.safetensors")
)PY";

TEST(LlamaPretrained, RoundTripsWithTransformers) {
  std::string d = testing::fresh_temp_dir("pretrained");
  LlamaConfig c;
  c.vocab_size = 80;
  c.hidden_size = 48;
  c.intermediate_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 32;
  torch::manual_seed(0);
  LlamaForCausalLM model(c);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.normal_(0, 0.2);  // norms too, so they matter
  }
  save_pretrained(c, checkpoint::model_state(*model), d + "/ours");
  auto ids = torch::randint(80, {2, 10}, torch::kInt64);
  checkpoint::save_safetensors(d + "/ids.safetensors", {{"ids", ids}});
  const auto failed = testing::run_python_check(COLOSSAL_TEST_PYTHON, kScript, d);
  ASSERT_EQ(failed, "") << "the transformers side failed: " << failed;

  torch::NoGradGuard no_grad;
  auto hf = checkpoint::SafetensorsFile::open(d + "/ours_in_transformers.safetensors")->load("logits");
  auto mine = model->forward(ids);
  EXPECT_TRUE(torch::allclose(mine, hf, 1e-4, 1e-4))
      << "max difference " << (mine - hf).abs().max().item<double>();

  auto loaded = load_pretrained(d + "/theirs");
  EXPECT_TRUE(loaded.report.clean()) << loaded.report.describe();
  EXPECT_EQ(loaded.config.rope_scaling.type, "llama3");
  EXPECT_EQ(loaded.config.num_key_value_heads, 2);
  auto theirs = checkpoint::SafetensorsFile::open(d + "/theirs_logits.safetensors");
  auto got = loaded.model->forward(theirs->load("ids"));
  auto want = theirs->load("logits");
  EXPECT_TRUE(torch::allclose(got, want, 1e-4, 1e-4))
      << "max difference " << (got - want).abs().max().item<double>();
}

TEST(LlamaPretrained, MissingAndMismatchedWeightsAreListed) {
  std::string d = testing::fresh_temp_dir("pretrained_bad");
  LlamaConfig c;
  c.vocab_size = 16;
  c.hidden_size = 8;
  c.intermediate_size = 12;
  c.num_hidden_layers = 1;
  c.num_attention_heads = 2;
  c.num_key_value_heads = 2;
  LlamaForCausalLM model(c);
  auto state = checkpoint::model_state(*model);
  state.erase(state.begin());  // drop model.embed_tokens.weight
  save_pretrained(c, state, d);
  auto msg = testing::error_message_of([&] { load_pretrained(d); });
  EXPECT_NE(msg.find("model.embed_tokens.weight"), std::string::npos) << msg;
}

}  // namespace
}  // namespace colossal::llama
