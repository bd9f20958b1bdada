// Video IO on the real clips setup unpacks (imageio's cockatoo.mp4 and realshort.mp4, OpenCV's
// vtest.avi and Megamind.avi): probing, decoding windows with stride and resizing, an H.264
// round trip at high quality, PSNR and SSIM, and broken files named.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cmath>
#include <fstream>

#include "core/common/env.h"
#include "core/common/fs.h"
#include "sora/io/contact_sheet.h"
#include "sora/io/quality.h"
#include "sora/io/video.h"
#include "tests/support/errors.h"

namespace sora_video_test {
using namespace colossal::sora;

std::string clip(const std::string& name) {
  const std::string root = colossal::cache_root() + "/corpus/clips/usr/";
  if (name == "cockatoo.mp4" || name == "realshort.mp4")
    return root + "lib/python3/dist-packages/imageio/resources/images/" + name;
  return root + "share/doc/opencv-doc/examples/data/" + name;
}

TEST(VideoIO, ProbesAndDecodesTheRealClips) {
  for (const char* name : {"cockatoo.mp4", "realshort.mp4", "vtest.avi", "Megamind.avi"}) {
    const auto info = probe_video(clip(name));
    EXPECT_GT(info.width, 0) << name;
    EXPECT_GT(info.fps, 0) << name;
    EXPECT_GT(info.frames, 0) << name;
    VideoInfo seen;
    const auto all = read_video(clip(name), {.height = 36, .width = 48}, &seen);  // every frame, small
    EXPECT_EQ(all.size(0), info.frames) << name << " (" << seen.codec << ")";
    EXPECT_EQ(seen.width, info.width) << name;
    const auto first = read_video(clip(name), {.num_frames = 1});
    EXPECT_EQ(first.size(1), info.height) << name;
    EXPECT_EQ(first.size(2), info.width) << name;
    EXPECT_GT(all.to(torch::kFloat).std().item<double>(), 10) << name << ": not a blank picture";
  }
  const auto info = probe_video(clip("vtest.avi"));
  EXPECT_EQ(info.width, 768);
  EXPECT_EQ(info.height, 576);
}

TEST(VideoIO, WindowsStrideAndResize) {
  const auto all = read_video(clip("cockatoo.mp4"));
  const auto window = read_video(clip("cockatoo.mp4"), {.start_frame = 5, .num_frames = 4, .stride = 3});
  ASSERT_EQ(window.size(0), 4);
  for (int k = 0; k < 4; ++k) EXPECT_TRUE(torch::equal(window[k], all[5 + 3 * k])) << k;
  // Resized: the shorter side scaled to the target, the centre cropped.
  const auto small = read_video(clip("vtest.avi"), {.num_frames = 2, .height = 32, .width = 64});
  EXPECT_EQ(small.sizes(), (std::vector<int64_t>{2, 32, 64, 3}));
  // 768x576 -> 64x48 (the shorter side to 32... the width to 64), then the middle 32 rows: as an
  // area-averaged resize of the full frame, cropped.
  const auto full = read_video(clip("vtest.avi"), {.num_frames = 1})[0].permute({2, 0, 1}).unsqueeze(0).to(torch::kFloat);
  const auto expected = torch::nn::functional::interpolate(
      full, torch::nn::functional::InterpolateFuncOptions().size(std::vector<int64_t>{48, 64}).mode(torch::kArea));
  const auto cropped = expected[0].permute({1, 2, 0}).narrow(0, 8, 32);
  const double error = (small[0].to(torch::kFloat) - cropped).abs().mean().item<double>();
  EXPECT_LT(error, 6) << "mean absolute difference from an area resize";
}

TEST(VideoIO, H264RoundTripKeepsFramesAndQuality) {
  const auto frames = read_video(clip("cockatoo.mp4"), {.num_frames = 24, .height = 128, .width = 160});
  const std::string out = ::testing::TempDir() + "roundtrip_" + std::to_string(::getpid()) + ".mp4";
  write_video(out, frames, {.fps = 12, .crf = 10});
  const auto info = probe_video(out);
  EXPECT_EQ(info.codec, "h264");
  EXPECT_EQ(info.frames, 24);
  EXPECT_NEAR(info.fps, 12, 1e-6);
  const auto back = read_video(out);
  ASSERT_EQ(back.sizes(), frames.sizes());
  const double db = psnr(back, frames);
  EXPECT_GE(db, 35) << "PSNR " << db << " dB";
  EXPECT_GE(ssim(back, frames), 0.95);
  EXPECT_NE(::access((out + ".partial.mp4").c_str(), F_OK), 0) << "the temporary file was left behind";
}

TEST(VideoIO, SsimOfKnownPairs) {
  const auto frames = read_video(clip("realshort.mp4"), {.num_frames = 4, .height = 48, .width = 64});
  EXPECT_NEAR(ssim(frames, frames), 1, 1e-12);
  // Flat frames: no variance, so SSIM is the luminance term (2ab + C1) / (a^2 + b^2 + C1).
  const auto a = torch::full({2, 16, 16, 3}, 100, torch::kUInt8), b = torch::full({2, 16, 16, 3}, 140, torch::kUInt8);
  const double c1 = std::pow(0.01 * 255, 2);
  EXPECT_NEAR(ssim(a, b), (2 * 100.0 * 140 + c1) / (100.0 * 100 + 140.0 * 140 + c1), 1e-9);
  // Noise of the clip's own statistics shares nothing with it.
  torch::manual_seed(0);
  const auto noise = (torch::rand(frames.sizes()) * 255).to(torch::kUInt8);
  EXPECT_LT(ssim(noise, frames), 0.1);
  EXPECT_LT(ssim(noise, frames), ssim(torch::clamp(frames.to(torch::kInt32) + 20, 0, 255).to(torch::kUInt8), frames));
  auto msg = colossal::testing::error_message_of([&] { ssim(a, frames); });
  EXPECT_NE(msg.find("ssim: expected two clips [T, H, W, 3] of one shape"), std::string::npos) << msg;
}

TEST(VideoIO, BrokenFilesAreNamed) {
  auto msg = colossal::testing::error_message_of([] { read_video("/nonexistent/clip.mp4"); });
  EXPECT_NE(msg.find("cannot open '/nonexistent/clip.mp4'"), std::string::npos) << msg;
  // A truncated copy of a real clip: its header promises more frames than its data holds.
  const std::string cut = ::testing::TempDir() + "truncated_" + std::to_string(::getpid()) + ".avi";
  {
    std::ifstream in(clip("vtest.avi"), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream(cut, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 3));
  }
  msg = colossal::testing::error_message_of([&] { read_video(cut); });
  EXPECT_NE(msg.find("'" + cut + "' is truncated or corrupt"), std::string::npos) << msg;
  msg = colossal::testing::error_message_of([&] { read_video(cut, {.start_frame = 700, .num_frames = 4}); });
  EXPECT_NE(msg.find("frames 700..703 (stride 1) asked, but only"), std::string::npos) << msg;
  // Not a video at all.
  const std::string text = ::testing::TempDir() + "not_a_video_" + std::to_string(::getpid()) + ".mp4";
  std::ofstream(text) << "hello";
  msg = colossal::testing::error_message_of([&] { read_video(text); });
  EXPECT_NE(msg.find(text), std::string::npos) << msg;
  msg = colossal::testing::error_message_of([] { write_video("/tmp/x.mp4", torch::zeros({2, 5, 6, 3}, torch::kUInt8)); });
  EXPECT_NE(msg.find("even height and width"), std::string::npos) << msg;
}

TEST(VideoIO, ContactSheetTilesTheFrames) {
  const auto frames = read_video(clip("realshort.mp4"), {.num_frames = 6, .height = 20, .width = 30});
  const std::string out = ::testing::TempDir() + "sheet_" + std::to_string(::getpid()) + ".png";
  write_contact_sheet(out, frames, {.columns = 4, .scale = 2, .gap = 2});
  const auto info = probe_video(out);  // FFmpeg reads a PNG as a one-frame video
  EXPECT_EQ(info.width, 2 + 4 * (60 + 2));
  EXPECT_EQ(info.height, 2 + 2 * (40 + 2));
  const auto sheet = read_video(out)[0];
  // The first tile is the first frame, doubled.
  const auto tile = sheet.narrow(0, 2, 40).narrow(1, 2, 60);
  const auto doubled = frames[0].repeat_interleave(2, 0).repeat_interleave(2, 1);
  EXPECT_LT((tile.to(torch::kFloat) - doubled.to(torch::kFloat)).abs().max().item<double>(), 2);
}

}  // namespace sora_video_test
