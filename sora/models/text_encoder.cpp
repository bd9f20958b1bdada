#include "sora/models/text_encoder.h"

#include <torch/torch.h>

#include "core/common/check.h"
#include "core/nn/module_hooks.h"
#include "sora/models/attention.h"

namespace colossal::sora {
namespace {

constexpr int64_t kPad = 0, kBos = 1, kEos = 2, kByteBase = 3, kVocab = kByteBase + 256;

class EncoderLayerImpl : public torch::nn::Module {
 public:
  EncoderLayerImpl(int64_t dim, int64_t heads) {
    norm1_ = register_module("norm1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
    attn_ = register_module("attn", SelfAttention(dim, heads));
    norm2_ = register_module("norm2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
    fc1_ = register_module("fc1", torch::nn::Linear(dim, 4 * dim));
    fc2_ = register_module("fc2", torch::nn::Linear(4 * dim, dim));
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& mask) {
    auto h = x + attn_->forward(nn::call(norm1_, x), mask);
    return h + nn::call(fc2_, torch::gelu(nn::call(fc1_, nn::call(norm2_, h)), "tanh"));
  }

 private:
  torch::nn::LayerNorm norm1_{nullptr}, norm2_{nullptr};
  SelfAttention attn_{nullptr};
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
};
TORCH_MODULE(EncoderLayer);

}  // namespace

void TextEncoderOptions::validate() const {
  COLOSSAL_CHECK(dim >= 1 && layers >= 1 && heads >= 1 && dim % heads == 0 && max_tokens >= 3,
                 "[text encoder] dim ", dim, ", layers ", layers, ", heads ", heads, ", max_tokens ", max_tokens,
                 ": expected positive, dim divisible by heads, max_tokens >= 3");
}

TextEncoderImpl::TextEncoderImpl(TextEncoderOptions options) : options_(std::move(options)) {
  options_.validate();
  embed_ = register_module("embed", torch::nn::Embedding(kVocab, options_.dim));
  position_ = register_module("position", torch::nn::Embedding(options_.max_tokens, options_.dim));
  layers_ = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < options_.layers; ++i) layers_->push_back(EncoderLayer(options_.dim, options_.heads));
  norm_ = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({options_.dim})));
}

std::pair<torch::Tensor, torch::Tensor> TextEncoderImpl::tokenize(const std::vector<std::string>& captions) const {
  const int64_t L = options_.max_tokens;
  auto ids = torch::full({static_cast<int64_t>(captions.size()), L}, kPad, torch::kInt64);
  auto* p = ids.data_ptr<int64_t>();
  for (size_t b = 0; b < captions.size(); ++b) {
    int64_t n = 0;
    p[b * L + n++] = kBos;
    for (unsigned char c : captions[b]) {
      if (n == L - 1) break;
      p[b * L + n++] = kByteBase + c;
    }
    p[b * L + n] = kEos;
  }
  return {ids, ids.ne(kPad)};
}

EncodedText TextEncoderImpl::forward(const std::vector<std::string>& captions) {
  auto [ids, mask] = tokenize(captions);
  auto h = nn::call(embed_, ids) + nn::call(position_, torch::arange(options_.max_tokens, torch::kInt64));
  for (const auto& layer : *layers_) h = layer->as<EncoderLayerImpl>()->forward(h, mask);
  return {nn::call(norm_, h), mask};
}

}  // namespace colossal::sora
