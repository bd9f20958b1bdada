// The video VAE: latent shapes, causality in time, and that it learns to reconstruct a real clip.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "sora/data/clip_csv.h"
#include "sora/data/video_windows.h"
#include "sora/io/quality.h"
#include "sora/io/video.h"
#include "sora/models/video_vae.h"
#include "tests/support/errors.h"

namespace sora_vae_test {
using namespace colossal::sora;

TEST(VideoVae, LatentShapesAndErrors) {
  torch::manual_seed(0);
  VideoVae vae(VideoVaeOptions{.base_channels = 16});
  const auto x = torch::rand({2, 3, 8, 32, 32}) * 2 - 1;
  const auto e = vae->encode(x);
  EXPECT_EQ(e.mean.sizes(), (std::vector<int64_t>{2, 4, 4, 8, 8}));
  EXPECT_EQ(vae->decode(e.mean).sizes(), x.sizes());
  const auto msg = colossal::testing::error_message_of([&] { vae->encode(torch::zeros({1, 3, 7, 32, 32})); });
  EXPECT_NE(msg.find("a clip of 7 frames of 32x32: frames must divide by 2 and height and width by 4"),
            std::string::npos) << msg;
  VideoVae four(VideoVaeOptions{.base_channels = 8, .multipliers = {1, 1, 1}, .temporal_factor = 4});
  EXPECT_EQ(four->encode(torch::zeros({1, 3, 8, 16, 24})).mean.sizes(), (std::vector<int64_t>{1, 4, 2, 2, 3}));
  EXPECT_NE(colossal::testing::error_message_of([] { VideoVae(VideoVaeOptions{.temporal_factor = 8}); })
                .find("temporal_factor 8"),
            std::string::npos);
}

TEST(VideoVae, LatentFramesSeeNoLaterInputFrames) {
  torch::manual_seed(1);
  VideoVae vae(VideoVaeOptions{.base_channels = 16});
  torch::NoGradGuard no_grad;
  const auto x = torch::rand({1, 3, 8, 16, 16}) * 2 - 1;
  auto later = x.clone();
  later.narrow(2, 6, 2).uniform_(-1, 1);  // frames 6 and 7: latent frame 3's
  const auto a = vae->encode(x).mean, b = vae->encode(later).mean;
  EXPECT_TRUE(torch::equal(a.narrow(2, 0, 3), b.narrow(2, 0, 3)));  // latent frames 0..2 unchanged
  EXPECT_FALSE(torch::allclose(a.narrow(2, 3, 1), b.narrow(2, 3, 1)));
}

TEST(VideoVae, LearnsToReconstructARealClip) {
  torch::manual_seed(2);
  auto clips = read_clip_csv(default_clip_csv());
  const auto w = load_windows({clips[0]}, {.frames = 8, .frame_stride = 4, .height = 32, .width = 32});
  const auto video = frames_to_video(w.videos.narrow(0, 0, 2));
  VideoVae vae(VideoVaeOptions{.base_channels = 16});
  torch::optim::Adam opt(vae->parameters(), torch::optim::AdamOptions(3e-3));
  auto quality = [&] {
    torch::NoGradGuard no_grad;
    vae->eval();
    const double db = psnr(video_to_frames(vae->loss(video).recon), video_to_frames(video));
    vae->train();
    return db;
  };
  const double before = quality();
  for (int step = 0; step < 60; ++step) {
    opt.zero_grad();
    vae->loss(video).total.backward();
    opt.step();
  }
  const double after = quality();
  std::printf("VAE on 2 real windows, 60 steps: PSNR %.1f dB -> %.1f dB\n", before, after);
  EXPECT_GT(after, before + 5) << before << " dB -> " << after << " dB";
  EXPECT_GT(after, 18) << before << " dB -> " << after << " dB";
}

}  // namespace sora_vae_test
