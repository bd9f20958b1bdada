// LLaMA configuration (Hugging Face config.json, rope scaling) and the decoder's structure.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <fstream>

#include "llama/config.h"
#include "llama/model.h"
#include "core/booster/booster.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "core/booster/plugins/gemini/gemini_plugin.h"
#include "tests/support/errors.h"
#include "tests/support/multirank.h"

namespace colossal::llama {
namespace {

// TinyLlama-1.1B's config.json as published, plus a field this model does not know.
const char* kTinyLlama = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "bos_token_id": 1,
  "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
  "intermediate_size": 5632, "max_position_embeddings": 2048, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 22, "num_key_value_heads": 4,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null, "rope_theta": 10000.0,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.35.0",
  "use_cache": true, "vocab_size": 32000, "sliding_window_size": 7})";

TEST(LlamaConfig, ReadsHuggingFaceConfigAndReportsUnknownFields) {
  std::vector<std::string> unknown;
  auto c = LlamaConfig::from_json_text(kTinyLlama, "tinyllama/config.json", &unknown);
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.resolved_head_dim(), 64);
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.num_parameters(), 1100048384) << "TinyLlama-1.1B's published parameter count";
  ASSERT_EQ(unknown.size(), 1u);
  EXPECT_EQ(unknown[0], "sliding_window_size");
  // What we write reads back the same.
  auto again = LlamaConfig::from_json_text(c.to_json(), "written", nullptr);
  EXPECT_EQ(again.to_json(), c.to_json());
}

TEST(LlamaConfig, ContradictionsAndWrongTypesNameTheField) {
  auto msg = testing::error_message_of([] {
    LlamaConfig::from_json_text(R"({"num_attention_heads": 32, "num_key_value_heads": 5})", "c.json");
  });
  EXPECT_NE(msg.find("c.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("num_attention_heads (32) must be a multiple of num_key_value_heads (5)"), std::string::npos) << msg;
  msg = testing::error_message_of([] { LlamaConfig::from_json_text(R"({"hidden_size": "big"})", "c.json"); });
  EXPECT_NE(msg.find("field 'hidden_size' expected an integer, found \"big\""), std::string::npos) << msg;
  msg = testing::error_message_of([] { LlamaConfig::from_json_text(R"({"model_type": "bert"})", "c.json"); });
  EXPECT_NE(msg.find("model_type is \"bert\", expected one of llama, mistral"), std::string::npos) << msg;
  msg = testing::error_message_of([] {
    LlamaConfig::from_json_text(R"({"rope_scaling": {"rope_type": "yarn", "factor": 4}})", "c.json");
  });
  EXPECT_NE(msg.find("rope_scaling type 'yarn' is not supported"), std::string::npos) << msg;
  // transformers 5's form: one rope_parameters object carrying rope_theta.
  auto v5 = LlamaConfig::from_json_text(
      R"({"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e6}})", "v5.json");
  EXPECT_EQ(v5.rope_scaling.type, "linear");
  EXPECT_DOUBLE_EQ(v5.rope_theta, 1e6);
}

// A config.json without a size field names the file and the field (transformers would fill in a
// 7B default and then report hundreds of mismatched tensors); no C++ backtrace reaches the user.
TEST(LlamaConfig, AFileMissingAShapeFieldNamesTheFileAndField) {
  const std::string path = ::testing::TempDir() + "config_missing_layers.json";
  std::string text = kTinyLlama;
  const std::string field = "\"num_hidden_layers\": 22,";
  text.erase(text.find(field), field.size());
  {
    std::ofstream(path) << text;
  }
  auto msg = testing::error_message_of([&] { LlamaConfig::from_json_file(path); });
  EXPECT_NE(msg.find("'" + path + "': field 'num_hidden_layers' is missing"), std::string::npos) << msg;
  // A contradiction found by validation is re-thrown with the file name, still without a backtrace.
  std::ofstream(path) << R"({"vocab_size": 10, "hidden_size": 8, "intermediate_size": 8, "num_hidden_layers": 1,
                             "num_attention_heads": 3})";
  msg = testing::error_message_of([&] { LlamaConfig::from_json_file(path); });
  EXPECT_NE(msg.find("hidden_size (8) is not divisible by num_attention_heads (3)"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("Exception raised from"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("frame #"), std::string::npos) << msg;
}

TEST(LlamaConfig, RopeScalingVariants) {
  LlamaConfig c;
  c.hidden_size = 4096;
  c.num_attention_heads = 32;  // head_dim 128
  c.rope_theta = 500000;
  c.max_position_embeddings = 131072;
  auto plain = c.rope_inv_freq(128);
  EXPECT_DOUBLE_EQ(plain[0], 1.0);
  EXPECT_NEAR(plain[63], std::pow(500000.0, -126.0 / 128), 1e-18);

  auto linear = c;
  linear.rope_scaling = {"linear", 4.0};
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_DOUBLE_EQ(linear.rope_inv_freq(128)[i], plain[i] / 4);

  // Llama 3.1: factor 8, low 1, high 4, original context 8192.
  auto l3 = c;
  l3.rope_scaling = {"llama3", 8.0, 1.0, 4.0, 8192};
  auto f = l3.rope_inv_freq(128);
  EXPECT_DOUBLE_EQ(f[0], plain[0]) << "wavelength 2*pi < 8192/4: unchanged";
  EXPECT_DOUBLE_EQ(f[63], plain[63] / 8) << "wavelength > 8192: divided by the factor";
  int smoothed = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    double wavelen = 2 * M_PI / plain[i];
    if (wavelen > 2048 && wavelen < 8192) {
      double smooth = (8192 / wavelen - 1) / 3;
      EXPECT_NEAR(f[i], (1 - smooth) * plain[i] / 8 + smooth * plain[i], 1e-15);
      ++smoothed;
    }
  }
  EXPECT_GT(smoothed, 0) << "some frequencies fall in the blended band";

  // Dynamic NTK: unchanged within the original length, a larger base beyond it.
  auto dyn = c;
  dyn.max_position_embeddings = 2048;
  dyn.rope_scaling = {"dynamic", 2.0};
  EXPECT_DOUBLE_EQ(dyn.rope_inv_freq(2048)[5], dyn.rope_inv_freq(16)[5]);
  EXPECT_LT(dyn.rope_inv_freq(4096)[5], dyn.rope_inv_freq(2048)[5]);
}

// A small model with grouped-query attention (4 heads, 2 key/value heads).
LlamaConfig tiny(bool tied) {
  LlamaConfig c;
  c.vocab_size = 64;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 16;
  c.tie_word_embeddings = tied;
  return c;
}

TEST(LlamaModel, HuggingFaceNamesShapesAndGroupedQueryAttention) {
  auto c = tiny(/*tied=*/false);
  torch::manual_seed(0);
  LlamaForCausalLM model(c);
  std::map<std::string, std::vector<int64_t>> shapes;
  int64_t total = 0;
  for (const auto& item : model->named_parameters()) {
    shapes[item.key()] = item.value().sizes().vec();
    total += item.value().numel();
  }
  EXPECT_EQ(total, c.num_parameters());
  EXPECT_EQ(shapes.at("model.embed_tokens.weight"), (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(shapes.at("model.layers.1.self_attn.k_proj.weight"), (std::vector<int64_t>{16, 32}));
  EXPECT_EQ(shapes.at("model.layers.0.mlp.gate_proj.weight"), (std::vector<int64_t>{48, 32}));
  EXPECT_EQ(shapes.at("model.layers.0.post_attention_layernorm.weight"), (std::vector<int64_t>{32}));
  EXPECT_EQ(shapes.at("model.norm.weight"), (std::vector<int64_t>{32}));
  EXPECT_EQ(shapes.at("lm_head.weight"), (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(model->buffers().size(), 0u) << "no rotary buffers in the state (HF has none)";

  auto ids = torch::randint(64, {2, 10});
  auto logits = model->forward(ids);
  EXPECT_EQ(logits.sizes(), (std::vector<int64_t>{2, 10, 64}));
  // Causal: logits at position 3 do not depend on tokens after it.
  auto changed = ids.clone();
  changed.index_put_({torch::indexing::Slice(), torch::indexing::Slice(5, 10)}, 7);
  auto logits2 = model->forward(changed);
  EXPECT_TRUE(torch::allclose(logits.narrow(1, 0, 4), logits2.narrow(1, 0, 4), 1e-5, 1e-6));
  EXPECT_FALSE(torch::allclose(logits.narrow(1, 6, 4), logits2.narrow(1, 6, 4), 1e-5, 1e-6));
  // A freshly initialised model predicts roughly uniformly: loss near ln(vocab).
  auto loss = model->loss(ids, ids).item<double>();
  EXPECT_NEAR(loss, std::log(64.0), 0.3);

  auto tied_cfg = tiny(/*tied=*/true);
  LlamaForCausalLM tied(tied_cfg);
  EXPECT_TRUE(tied->lm_head.is_empty()) << "tied: the embedding matrix is the output layer";
  EXPECT_EQ(tied->forward(ids).sizes(), (std::vector<int64_t>{2, 10, 64}));
  int64_t tied_total = 0;
  for (const auto& p : tied->parameters()) tied_total += p.numel();
  EXPECT_EQ(tied_total, tied_cfg.num_parameters()) << "the shared matrix counts once";
}

// Losses of `steps` AdamW steps on 4 sequences of 8 tokens; with a plugin each rank takes its
// sequences of the global batch.
std::vector<double> train(const LlamaConfig& c, std::shared_ptr<booster::Plugin> plugin, int steps) {
  torch::manual_seed(3);
  LlamaForCausalLM model(c);
  auto opt = std::make_shared<torch::optim::AdamW>(model->parameters(), torch::optim::AdamWOptions(1e-2));
  auto g = torch::make_generator<at::CPUGeneratorImpl>(11);
  auto data = at::randint(c.vocab_size, {steps, 4, 8}, g, torch::kInt64);
  std::vector<double> losses;
  if (!plugin) {
    for (int s = 0; s < steps; ++s) {
      opt->zero_grad();
      auto loss = model->loss(data[s], data[s]);
      loss.backward();
      opt->step();
      losses.push_back(loss.item<double>());
    }
    return losses;
  }
  booster::Booster booster(plugin);
  auto b = booster.boost(model.ptr(), opt);
  int n = dist::world_size(), r = dist::rank(), local = 4 / n;
  for (int s = 0; s < steps; ++s) {
    b.optimizer->zero_grad();
    auto ids = data[s].narrow(0, r * local, local);
    auto loss = model->loss(ids, ids);
    booster.backward(loss, *b.optimizer);
    b.optimizer->step();
    auto l = loss.detach().to(torch::kFloat64).reshape({1});
    dist::all_reduce(l, dist::world_group(), dist::ReduceOp::kAvg);
    losses.push_back(l.item<double>());
  }
  return losses;
}

// The tensor-parallel plan covers every parameter-owning module exactly by one rule.
TEST(LlamaModel, ParallelPlanCoversEveryParameter) {
  for (bool tied : {false, true}) {
    auto c = tiny(tied);
    LlamaForCausalLM model(c);
    auto plan = parallel_plan(c);
    for (const auto& item : model->named_parameters()) {
      std::string module = item.key().substr(0, item.key().rfind('.'));
      int matches = 0;
      for (const auto& r : plan.rules) matches += parallel::path_matches(r.pattern, module);
      EXPECT_EQ(matches, 1) << module << (tied ? " (tied)" : "");
    }
    auto* q = plan.find("model.layers.1.self_attn.q_proj");
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(q->style, parallel::SplitStyle::kColumn);
    EXPECT_EQ(plan.find("model.layers.1.mlp.down_proj")->style, parallel::SplitStyle::kRow);
    EXPECT_EQ(plan.find("model.layers.x.y.mlp.down_proj"), nullptr) << "'*' is one component";
  }
}

// Past max_position_embeddings only dynamic (NTK) rope scaling is defined: it runs, with tables
// built for the longer length; without it the error names the limit.
TEST(LlamaModel, OnlyDynamicRopeRunsPastMaxPositions) {
  torch::NoGradGuard no_grad;
  auto c = tiny(/*tied=*/false);
  torch::manual_seed(0);
  LlamaForCausalLM plain(c);
  auto long_ids = torch::randint(c.vocab_size, {1, c.max_position_embeddings + 8}, torch::kInt64);
  auto msg = testing::error_message_of([&] { plain->forward(long_ids); });
  EXPECT_NE(msg.find("exceeds max_position_embeddings " + std::to_string(c.max_position_embeddings)),
            std::string::npos) << msg;
  c.rope_scaling = {"dynamic", 2.0};
  torch::manual_seed(0);
  LlamaForCausalLM dynamic(c);
  auto logits = dynamic->forward(long_ids);
  EXPECT_EQ(logits.size(1), c.max_position_embeddings + 8);
  EXPECT_TRUE(torch::isfinite(logits).all().item<bool>());
  // Within the trained length the dynamic model is the unscaled one (same weights, same seed).
  auto short_ids = long_ids.narrow(1, 0, c.max_position_embeddings);
  EXPECT_TRUE(torch::allclose(dynamic->forward(short_ids), plain->forward(short_ids)));
  // Past it the base grows, so even the early positions see different rotations.
  EXPECT_FALSE(torch::allclose(logits.narrow(1, 0, 4), plain->forward(short_ids).narrow(1, 0, 4)));
}

TEST(LlamaZero, Zero3MatchesOneProcessWithAndWithoutTiedEmbeddings) {
  // Every parameter of the model reaches ZeRO-3 through colossal::nn::call (checked in the
  // first step), the tied output layer included.
  testing::run_ranks(2, [] {
    for (bool tied : {false, true}) {
      auto want = train(tiny(tied), nullptr, 4);
      booster::GeminiPlugin::Options o;
      o.chunk_elements = 4096;
      o.keep_gathered_below = 64;
      auto got = train(tiny(tied), std::make_shared<booster::GeminiPlugin>(o), 4);
      for (size_t s = 0; s < want.size(); ++s)
        EXPECT_NEAR(got[s], want[s], 1e-5 * want[s]) << "step " << s << (tied ? " (tied)" : "");
    }
  });
}

}  // namespace
}  // namespace colossal::llama
