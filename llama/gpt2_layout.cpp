#include "llama/gpt2_layout.h"

#include <ATen/ATen.h>

#include <map>

#include "core/common/check.h"

namespace colossal::llama {
namespace {

// Our name -> GPT-2's, for the tensors that are only renamed (and transposed: `conv1d`).
struct Renamed {
  std::string ours, theirs;
  bool conv1d;
};

std::vector<Renamed> renamed(const LlamaConfig& c, const std::string& prefix) {
  std::vector<Renamed> out = {{"model.embed_tokens.weight", prefix + "wte.weight", false},
                              {"model.embed_positions.weight", prefix + "wpe.weight", false},
                              {"model.norm.weight", prefix + "ln_f.weight", false},
                              {"model.norm.bias", prefix + "ln_f.bias", false}};
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", "lm_head.weight", false});
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string o = "model.layers." + std::to_string(i) + ".", t = prefix + "h." + std::to_string(i) + ".";
    for (const char* p : {"weight", "bias"}) {
      const std::string part = p;
      const bool w = part == "weight";
      out.push_back({o + "input_layernorm." + part, t + "ln_1." + part, false});
      out.push_back({o + "post_attention_layernorm." + part, t + "ln_2." + part, false});
      out.push_back({o + "self_attn.o_proj." + part, t + "attn.c_proj." + part, w});
      out.push_back({o + "mlp.up_proj." + part, t + "mlp.c_fc." + part, w});
      out.push_back({o + "mlp.down_proj." + part, t + "mlp.c_proj." + part, w});
    }
  }
  return out;
}

std::string layer(int64_t i) { return "model.layers." + std::to_string(i) + ".self_attn."; }

}  // namespace

void adapt_gpt2_checkpoint(checkpoint::CheckpointReader& reader, const LlamaConfig& c) {
  const std::string prefix = reader.contains("transformer.wte.weight") ? "transformer." : "";
  COLOSSAL_CHECK(reader.contains(prefix + "wte.weight"), "[llama] '", reader.dir(),
                 "': a gpt2 config.json, but no transformer.wte.weight (or wte.weight) in the weights");
  for (const auto& r : renamed(c, prefix)) {
    if (r.ours == r.theirs || !reader.contains(r.theirs)) continue;  // missing: reported under our name
    auto shape = reader.info(r.theirs).shape;
    if (r.conv1d && shape.size() == 2) std::swap(shape[0], shape[1]);
    const std::string theirs = r.theirs;
    const bool conv1d = r.conv1d;
    reader.derive(r.ours, reader.info(r.theirs).dtype, shape, [theirs, conv1d](const checkpoint::CheckpointReader& f) {
      auto t = f.view(theirs);
      return conv1d && t.dim() == 2 ? t.t() : t;
    });
    reader.hide(r.theirs);
  }
  // c_attn: [hidden, 3 x hidden] (Conv1D) holds q, k and v side by side.
  const int64_t h = c.hidden_size;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string t = prefix + "h." + std::to_string(i) + ".attn.";
    for (const char* p : {"weight", "bias"}) {
      const std::string name = t + "c_attn." + p;
      if (!reader.contains(name)) continue;
      const auto& info = reader.info(name);
      const bool weight = std::string(p) == "weight";
      COLOSSAL_CHECK(info.shape.size() == (weight ? 2u : 1u) && info.shape.back() == 3 * h, "[llama] '", reader.dir(),
                     "': ", name, " is ", at::IntArrayRef(info.shape), ", expected ",
                     weight ? "[" + std::to_string(h) + ", " + std::to_string(3 * h) + "]"
                            : "[" + std::to_string(3 * h) + "]");
      const char* parts[] = {"q_proj.", "k_proj.", "v_proj."};
      for (int k = 0; k < 3; ++k) {
        std::vector<int64_t> shape = weight ? std::vector<int64_t>{h, info.shape[0]} : std::vector<int64_t>{h};
        auto make = [name, k, h, weight](const checkpoint::CheckpointReader& f) {
          auto part = f.view(name).narrow(-1, k * h, h);
          return weight ? part.t() : part;
        };
        reader.derive(layer(i) + parts[k] + p, info.dtype, shape, make);
      }
      reader.hide(name);
    }
    // Old files keep the causal mask as buffers; nothing of the model.
    for (const char* buffer : {"bias", "masked_bias"})
      if (reader.contains(t + buffer)) reader.hide(t + buffer);
  }
  if (c.tie_word_embeddings && reader.contains("lm_head.weight")) reader.hide("lm_head.weight");  // the embedding
}

checkpoint::NamedTensors to_gpt2_checkpoint(const checkpoint::NamedTensors& weights, const LlamaConfig& c) {
  std::map<std::string, at::Tensor> ours(weights.begin(), weights.end());
  auto take = [&](const std::string& name) {
    auto it = ours.find(name);
    COLOSSAL_CHECK(it != ours.end(), "[llama] saving as GPT-2: no weight '", name, "'");
    auto t = it->second;
    ours.erase(it);
    return t;
  };
  checkpoint::NamedTensors out;
  const std::string prefix = "transformer.";
  for (const auto& r : renamed(c, prefix)) {
    auto t = take(r.ours);
    out.emplace_back(r.theirs, r.conv1d ? t.t().contiguous() : t);
  }
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string t = prefix + "h." + std::to_string(i) + ".attn.c_attn.";
    auto q = take(layer(i) + "q_proj.weight"), k = take(layer(i) + "k_proj.weight");
    auto v = take(layer(i) + "v_proj.weight");
    out.emplace_back(t + "weight", at::cat({q, k, v}, 0).t().contiguous());
    auto qb = take(layer(i) + "q_proj.bias"), kb = take(layer(i) + "k_proj.bias"), vb = take(layer(i) + "v_proj.bias");
    out.emplace_back(t + "bias", at::cat({qb, kb, vb}, 0));
  }
  COLOSSAL_CHECK(ours.empty(), "[llama] saving as GPT-2: weight '", ours.begin()->first, "' has no GPT-2 name");
  return out;
}

}  // namespace colossal::llama
