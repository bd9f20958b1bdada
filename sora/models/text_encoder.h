#pragma once
// The caption encoder: a small transformer over a caption's UTF-8 bytes (BOS, bytes, EOS, then
// padding to a fixed length), trained with the diffusion transformer. Open-Sora uses T5-XXL;
// captions here are a few words and a byte vocabulary needs no tokenizer file, so the model can
// be built and tested from nothing. Returns per-token features and a mask of the real tokens,
// which STDiT's cross-attention reads.
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/normalization.h>

#include <cstdint>
#include <string>
#include <vector>

namespace colossal::sora {

struct TextEncoderOptions {
  int64_t dim = 128, layers = 2, heads = 4, max_tokens = 64;
  void validate() const;
};

struct EncodedText {
  torch::Tensor tokens;  // [B, L, dim]
  torch::Tensor mask;    // [B, L] bool: real tokens
};

class TextEncoderImpl : public torch::nn::Module {
 public:
  explicit TextEncoderImpl(TextEncoderOptions options = {});
  /// Token ids [B, L] and mask for the captions (longer ones are cut at max_tokens).
  std::pair<torch::Tensor, torch::Tensor> tokenize(const std::vector<std::string>& captions) const;
  EncodedText forward(const std::vector<std::string>& captions);
  const TextEncoderOptions& options() const { return options_; }

 private:
  TextEncoderOptions options_;
  torch::nn::Embedding embed_{nullptr}, position_{nullptr};
  torch::nn::ModuleList layers_;
  torch::nn::LayerNorm norm_{nullptr};
};
TORCH_MODULE(TextEncoder);

}  // namespace colossal::sora
