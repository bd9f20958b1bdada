#include "sora/models/video_vae.h"

#include <torch/torch.h>

#include "core/common/check.h"
#include "core/nn/module_hooks.h"

namespace colossal::sora {
namespace {

namespace F = torch::nn::functional;

// Temporal convolution padded on the past side only (causal), stride 1 or 2 in time.
class CausalTemporalConvImpl : public torch::nn::Module {
 public:
  CausalTemporalConvImpl(int64_t in, int64_t out, int64_t stride = 1) : stride_(stride) {
    conv_ = register_module("conv", torch::nn::Conv3d(torch::nn::Conv3dOptions(in, out, {3, 1, 1})
                                                          .stride({stride, 1, 1})));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    // Two frames of the past (the first frame repeated): frame t sees t-2..t.
    const auto first = x.narrow(2, 0, 1);
    return nn::call(conv_, torch::cat({first, first, x}, 2).narrow(2, stride_ == 2 ? 1 : 0,
                                                                   x.size(2) + (stride_ == 2 ? 1 : 2)));
  }

 private:
  torch::nn::Conv3d conv_{nullptr};
  int64_t stride_;
};
TORCH_MODULE(CausalTemporalConv);

// GroupNorm over each frame by itself (not over time), so normalisation keeps the encoder causal.
torch::Tensor frame_norm(torch::nn::GroupNorm& norm, const torch::Tensor& x) {
  const int64_t b = x.size(0), c = x.size(1), t = x.size(2), h = x.size(3), w = x.size(4);
  const auto frames = x.permute({0, 2, 1, 3, 4}).reshape({b * t, c, h, w});
  return nn::call(norm, frames).reshape({b, t, c, h, w}).permute({0, 2, 1, 3, 4});
}

torch::nn::Conv3d spatial_conv(int64_t in, int64_t out, int64_t stride = 1) {
  return torch::nn::Conv3d(torch::nn::Conv3dOptions(in, out, {1, 3, 3}).stride({1, stride, stride}).padding({0, 1, 1}));
}

// GroupNorm-SiLU-spatial conv-temporal conv, twice, with a residual path.
class ResBlockImpl : public torch::nn::Module {
 public:
  ResBlockImpl(int64_t in, int64_t out) {
    norm1_ = register_module("norm1", torch::nn::GroupNorm(std::min<int64_t>(8, in), in));
    spatial1_ = register_module("spatial1", spatial_conv(in, out));
    temporal1_ = register_module("temporal1", CausalTemporalConv(out, out));
    norm2_ = register_module("norm2", torch::nn::GroupNorm(std::min<int64_t>(8, out), out));
    spatial2_ = register_module("spatial2", spatial_conv(out, out));
    temporal2_ = register_module("temporal2", CausalTemporalConv(out, out));
    if (in != out) skip_ = register_module("skip", torch::nn::Conv3d(torch::nn::Conv3dOptions(in, out, 1)));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = temporal1_->forward(nn::call(spatial1_, F::silu(frame_norm(norm1_, x))));
    h = temporal2_->forward(nn::call(spatial2_, F::silu(frame_norm(norm2_, h))));
    return (skip_ ? nn::call(skip_, x) : x) + h;
  }

 private:
  torch::nn::GroupNorm norm1_{nullptr}, norm2_{nullptr};
  torch::nn::Conv3d spatial1_{nullptr}, spatial2_{nullptr}, skip_{nullptr};
  CausalTemporalConv temporal1_{nullptr}, temporal2_{nullptr};
};
TORCH_MODULE(ResBlock);

// Halves height and width (and time when asked).
class DownsampleImpl : public torch::nn::Module {
 public:
  DownsampleImpl(int64_t channels, bool time) {
    spatial_ = register_module("spatial", spatial_conv(channels, channels, 2));
    if (time) temporal_ = register_module("temporal", CausalTemporalConv(channels, channels, 2));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = nn::call(spatial_, x);
    return temporal_ ? temporal_->forward(h) : h;
  }

 private:
  torch::nn::Conv3d spatial_{nullptr};
  CausalTemporalConv temporal_{nullptr};
};
TORCH_MODULE(Downsample);

// Doubles height and width (and time when asked) by repetition, then a spatial convolution.
class UpsampleImpl : public torch::nn::Module {
 public:
  UpsampleImpl(int64_t channels, bool time) : time_(time) { conv_ = register_module("conv", spatial_conv(channels, channels)); }
  torch::Tensor forward(const torch::Tensor& x) {
    auto h = x.repeat_interleave(2, 3).repeat_interleave(2, 4);
    if (time_) h = h.repeat_interleave(2, 2);
    return nn::call(conv_, h);
  }

 private:
  torch::nn::Conv3d conv_{nullptr};
  bool time_;
};
TORCH_MODULE(Upsample);

int64_t log2_exact(int64_t v) {
  int64_t l = 0;
  while ((int64_t{1} << l) < v) ++l;
  return l;
}

}  // namespace

void VideoVaeOptions::validate() const {
  COLOSSAL_CHECK(in_channels >= 1 && latent_channels >= 1 && base_channels >= 1 && !multipliers.empty(),
                 "[video vae] channels (", in_channels, ", latent ", latent_channels, ", base ", base_channels,
                 ") and levels (", multipliers.size(), "): expected >= 1");
  COLOSSAL_CHECK(temporal_factor >= 1 && (temporal_factor & (temporal_factor - 1)) == 0 &&
                     log2_exact(temporal_factor) <= static_cast<int64_t>(multipliers.size()),
                 "[video vae] temporal_factor ", temporal_factor, ": expected a power of two up to 2^levels (",
                 spatial_factor(), ")");
  COLOSSAL_CHECK(kl_weight >= 0, "[video vae] kl_weight ", kl_weight, ": expected >= 0");
}

torch::Tensor VaeEncoding::sample(bool random) const {
  return random ? mean + torch::exp(0.5 * logvar) * torch::randn_like(mean) : mean;
}

torch::Tensor VaeEncoding::kl() const { return 0.5 * (mean.pow(2) + logvar.exp() - 1 - logvar).mean(); }

VideoVaeImpl::VideoVaeImpl(VideoVaeOptions options) : options_(std::move(options)) {
  options_.validate();
  const auto& o = options_;
  const int64_t time_levels = log2_exact(o.temporal_factor);
  encoder_ = register_module("encoder", torch::nn::ModuleList());
  decoder_ = register_module("decoder", torch::nn::ModuleList());
  enc_in_ = register_module("enc_in", spatial_conv(o.in_channels, o.base_channels));
  int64_t channels = o.base_channels;
  for (size_t l = 0; l < o.multipliers.size(); ++l) {
    const int64_t out = o.base_channels * o.multipliers[l];
    encoder_->push_back(ResBlock(channels, out));
    encoder_->push_back(Downsample(out, static_cast<int64_t>(l) < time_levels));
    channels = out;
  }
  encoder_->push_back(ResBlock(channels, channels));
  enc_norm_ = register_module("enc_norm", torch::nn::GroupNorm(std::min<int64_t>(8, channels), channels));
  enc_out_ = register_module("enc_out", spatial_conv(channels, 2 * o.latent_channels));
  dec_in_ = register_module("dec_in", spatial_conv(o.latent_channels, channels));
  decoder_->push_back(ResBlock(channels, channels));
  for (size_t k = o.multipliers.size(); k-- > 0;) {
    const int64_t out = o.base_channels * (k > 0 ? o.multipliers[k - 1] : 1);
    decoder_->push_back(Upsample(channels, static_cast<int64_t>(k) < time_levels));
    decoder_->push_back(ResBlock(channels, out));
    channels = out;
  }
  dec_norm_ = register_module("dec_norm", torch::nn::GroupNorm(std::min<int64_t>(8, channels), channels));
  dec_out_ = register_module("dec_out", spatial_conv(channels, o.in_channels));
}

std::vector<int64_t> VideoVaeImpl::latent_shape(torch::IntArrayRef s) const {
  COLOSSAL_CHECK(s.size() == 5 && s[1] == options_.in_channels, "[video vae] expected a clip [B, ",
                 options_.in_channels, ", T, H, W], got ", s);
  const int64_t fs = options_.spatial_factor(), ft = options_.temporal_factor;
  COLOSSAL_CHECK(s[2] % ft == 0 && s[3] % fs == 0 && s[4] % fs == 0, "[video vae] a clip of ", s[2], " frames of ",
                 s[3], "x", s[4], ": frames must divide by ", ft, " and height and width by ", fs);
  return {s[0], options_.latent_channels, s[2] / ft, s[3] / fs, s[4] / fs};
}

VaeEncoding VideoVaeImpl::encode(const torch::Tensor& video) {
  latent_shape(video.sizes());
  auto h = nn::call(enc_in_, video);
  for (const auto& m : *encoder_) {
    if (auto r = m->as<ResBlockImpl>()) h = r->forward(h);
    else h = m->as<DownsampleImpl>()->forward(h);
  }
  const auto moments = nn::call(enc_out_, F::silu(frame_norm(enc_norm_, h)));
  auto parts = moments.chunk(2, 1);
  return {parts[0], parts[1].clamp(-30, 20)};
}

torch::Tensor VideoVaeImpl::decode(const torch::Tensor& latent) {
  COLOSSAL_CHECK(latent.dim() == 5 && latent.size(1) == options_.latent_channels, "[video vae] expected latents [B, ",
                 options_.latent_channels, ", T, H, W], got ", latent.sizes());
  auto h = nn::call(dec_in_, latent);
  for (const auto& m : *decoder_) {
    if (auto r = m->as<ResBlockImpl>()) h = r->forward(h);
    else h = m->as<UpsampleImpl>()->forward(h);
  }
  return nn::call(dec_out_, F::silu(frame_norm(dec_norm_, h)));
}

VaeLoss VideoVaeImpl::loss(const torch::Tensor& video, const torch::Tensor& noise) {
  const auto e = encode(video);
  auto recon = decode(!is_training() ? e.mean : noise.defined() ? e.sample_with(noise) : e.sample());
  VaeLoss l;
  l.reconstruction = (recon - video).abs().mean();
  l.kl = e.kl();
  l.total = l.reconstruction + options_.kl_weight * l.kl;
  l.recon = recon;
  return l;
}

torch::Tensor frames_to_video(const torch::Tensor& frames) {
  const auto f = frames.dim() == 4 ? frames.unsqueeze(0) : frames;
  COLOSSAL_CHECK(f.dim() == 5 && f.size(4) == 3, "[video] expected frames [B, T, H, W, 3], got ", frames.sizes());
  return f.permute({0, 4, 1, 2, 3}).to(torch::kFloat).div(127.5).sub(1).contiguous();
}

torch::Tensor video_to_frames(const torch::Tensor& video) {
  return video.detach().add(1).mul(127.5).round().clamp(0, 255).to(torch::kUInt8).permute({0, 2, 3, 4, 1}).contiguous();
}

}  // namespace colossal::sora
