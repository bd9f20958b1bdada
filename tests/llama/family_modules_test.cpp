// Each family's own piece checked on its own against transformers' module with the same weights
// and inputs (fp32, max difference 1e-5): Gemma 2's attention (its query_pre_attn_scalar scale,
// the tanh soft cap on the scores, a sliding-window layer), Gemma's GeGLU MLP (tanh GELU on the
// gate), Qwen3's attention with its per-head q/k RMSNorm and an explicit head_dim, and GPT-2's
// attention read from the Conv1D c_attn / c_proj layout (transposed, q, k and v side by side).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/checkpoint/model_io.h"
#include "llama/config.h"
#include "llama/model.h"
#include "tests/support/python_check.h"

namespace colossal::llama {
namespace {

struct Case {
  const char* name;
  const char* config_json;
  const char* module;  // attention | mlp
};

// The transformers configs the Python side builds from the same text.
const Case kCases[] = {
    {"gemma2_attention",
     R"({"model_type": "gemma2", "vocab_size": 64, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "query_pre_attn_scalar": 24,
         "sliding_window": 6, "attn_logit_softcapping": 3.0, "final_logit_softcapping": null,
         "max_position_embeddings": 64, "rope_theta": 10000.0})",
     "attention"},
    {"gemma_mlp",
     R"({"model_type": "gemma", "vocab_size": 64, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 1,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "hidden_activation": "gelu_pytorch_tanh",
         "max_position_embeddings": 64})",
     "mlp"},
    {"qwen3_attention",
     R"({"model_type": "qwen3", "vocab_size": 64, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 1,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 24, "max_position_embeddings": 64,
         "rope_theta": 1000000.0, "rms_norm_eps": 1e-6})",
     "attention"},
    {"gpt2_attention",
     R"({"model_type": "gpt2", "vocab_size": 64, "n_embd": 64, "n_layer": 1, "n_head": 4, "n_positions": 64,
         "activation_function": "gelu_new"})",
     "attention"},
};

constexpr const char* kScript = R"PY(
import json, sys
import torch
import transformers as tf
from safetensors.torch import load_file

root = sys.argv[1]
names = open(f"{root}/cases.txt").read().split()
worst = 0.0
for name in names:
    d = f"{root}/{name}"
    cfg_json = json.load(open(f"{d}/config.json"))
    t = load_file(f"{d}/model.safetensors")
    x, ours = t.pop("x"), t.pop("out")
    B, T, _ = x.shape
    cls = {"gemma2": tf.Gemma2Config, "gemma": tf.GemmaConfig, "qwen3": tf.Qwen3Config, "gpt2": tf.GPT2Config}
    config = cls[cfg_json.pop("model_type")](**cfg_json)
    config._attn_implementation = "eager"
    causal = torch.ones(T, T).tril().bool()
    if name == "gemma2_attention":  # layer 0 is a sliding-window layer: keys within the window only
        i = torch.arange(T)
        causal &= (i[:, None] - i[None, :]) < config.sliding_window
    mask = torch.zeros(B, 1, T, T).masked_fill(~causal, torch.finfo(torch.float32).min)
    pos = torch.arange(T).unsqueeze(0).expand(B, T)
    with torch.no_grad():
        if name == "gemma_mlp":
            m = tf.models.gemma.modeling_gemma.GemmaMLP(config)
            m.load_state_dict(t)
            want = m.eval()(x)
        elif name == "gpt2_attention":  # Conv1D: [in, out], q, k and v side by side
            m = tf.models.gpt2.modeling_gpt2.GPT2Attention(config, layer_idx=0)
            m.load_state_dict({
                "c_attn.weight": torch.cat([t["q_proj.weight"], t["k_proj.weight"], t["v_proj.weight"]]).t(),
                "c_attn.bias": torch.cat([t["q_proj.bias"], t["k_proj.bias"], t["v_proj.bias"]]),
                "c_proj.weight": t["o_proj.weight"].t(), "c_proj.bias": t["o_proj.bias"]})
            want = m.eval()(x, attention_mask=mask)[0]  # eval: no attention or residual dropout
        else:
            mod = {"gemma2_attention": (tf.models.gemma2.modeling_gemma2, "Gemma2"),
                   "qwen3_attention": (tf.models.qwen3.modeling_qwen3, "Qwen3")}[name]
            m = getattr(mod[0], mod[1] + "Attention")(config, layer_idx=0)
            m.load_state_dict(t)
            rope = getattr(mod[0], mod[1] + "RotaryEmbedding")(config)
            want = m.eval()(x, position_embeddings=rope(x, pos), attention_mask=mask)[0]
    diff = (want - ours).abs().max().item()
    print(f"{name}: max difference {diff:.3g} (outputs up to {want.abs().max().item():.3g})")
    worst = max(worst, diff)
sys.exit(0 if worst < 1e-5 else 1)
)PY";

TEST(FamilyModules, EachFamilysOwnPieceMatchesTransformersModule) {
  const std::string root = testing::fresh_temp_dir("family_modules");
  std::string names;
  for (const auto& c : kCases) {
    SCOPED_TRACE(c.name);
    const auto config = LlamaConfig::from_json_text(c.config_json, c.name);
    const auto plan = parallel_plan(config);
    const parallel::ParallelContext single;
    const BuildContext root_builder{plan, single, ""};
    torch::manual_seed(3);
    const int64_t B = 2, T = 10;
    auto x = torch::randn({B, T, config.hidden_size});
    torch::Tensor out;
    checkpoint::NamedTensors tensors;
    torch::NoGradGuard no_grad;
    auto randomise = [&](torch::nn::Module& m) {
      for (auto& p : m.named_parameters()) {
        // Norm weights near 1 (q/k norms), everything else spread enough that the caps bend.
        if (p.key().find("norm") != std::string::npos) p.value().copy_(1 + 0.3 * torch::randn_like(p.value()));
        else p.value().copy_(0.3 * torch::randn_like(p.value()));
        tensors.push_back({p.key(), p.value().clone()});
      }
    };
    if (std::string(c.module) == "mlp") {
      MLP mlp(config, root_builder.at("model.layers.0.mlp"));
      randomise(*mlp);
      out = mlp->forward(x);
    } else {
      Attention attention(config, root_builder.at("model.layers.0.self_attn"), 0);
      randomise(*attention);
      const auto rope = RotaryTables::make(config, T);
      out = attention->forward(x, rope, {torch::arange(T, torch::kLong), {}});
    }
    tensors.push_back({"x", x});
    tensors.push_back({"out", out.contiguous()});
    const std::string d = root + "/" + c.name;
    checkpoint::save_model_state(tensors, d);
    FILE* f = std::fopen((d + "/config.json").c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs(c.config_json, f);
    std::fclose(f);
    names += std::string(c.name) + "\n";
  }
  FILE* f = std::fopen((root + "/cases.txt").c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs(names.c_str(), f);
  std::fclose(f);
  EXPECT_EQ(testing::run_python_check(COLOSSAL_TEST_PYTHON, kScript, root), "");
}

}  // namespace
}  // namespace colossal::llama
