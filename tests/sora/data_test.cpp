// The clip CSV (Open-Sora's format), the windows cut from real clips, and the latent cache.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <map>

#include "sora/data/clip_csv.h"
#include "sora/data/latent_cache.h"
#include "sora/data/video_windows.h"
#include "sora/io/video.h"
#include "tests/support/errors.h"

namespace sora_data_test {
using namespace colossal::sora;

TEST(ClipData, TheBuiltInCsvListsTheRealClips) {
  const auto clips = read_clip_csv(default_clip_csv());
  ASSERT_EQ(clips.size(), 3u);
  EXPECT_EQ(clips[0].text, "a white cockatoo looks into the camera");
  EXPECT_EQ(clips[0].num_frames, 280);
  EXPECT_EQ(clips[0].width, 1280);
  EXPECT_EQ(clips[2].height, 576);
  EXPECT_NEAR(clips[2].fps, 10, 1e-9);
  // Written and read back, quoting a caption with a comma and a quote.
  auto edited = clips;
  edited[1].text = "a tree, \"potted\"";
  const std::string path = ::testing::TempDir() + "clips_" + std::to_string(::getpid()) + ".csv";
  write_clip_csv(path, edited);
  EXPECT_EQ(read_clip_csv(path)[1].text, "a tree, \"potted\"");
}

TEST(ClipData, WindowsAreCutFromTheDecodedClips) {
  auto clips = read_clip_csv(default_clip_csv());
  clips.resize(2);  // cockatoo (280 frames) and realshort (36)
  const auto w = load_windows(clips, {.frames = 8, .frame_stride = 4, .height = 24, .width = 32});
  // 280 / 4 = 70 kept frames -> 8 windows; 36 / 4 = 9 -> 1 window.
  ASSERT_EQ(w.size(), 9);
  EXPECT_EQ(w.videos.sizes(), (std::vector<int64_t>{9, 8, 24, 32, 3}));
  EXPECT_EQ(w.captions[8], "a potted tree on a windowsill");
  EXPECT_NE(w.origins[1].find("cockatoo.mp4 @ frame 32"), std::string::npos) << w.origins[1];
  const auto direct = read_video(clips[0].path, {.start_frame = 32, .num_frames = 8, .stride = 4, .height = 24, .width = 32});
  EXPECT_TRUE(torch::equal(w.videos[1], direct));
  EXPECT_EQ(w.clips, (std::vector<int64_t>{0, 0, 0, 0, 0, 0, 0, 0, 1}));
}

TEST(ClipData, SplitAndBalance) {
  // Clip 0 has 12 windows, clip 1 one, clip 2 four; every 4th window of each clip held out.
  std::vector<int64_t> clip_of(12, 0);
  clip_of.push_back(1);
  for (int i = 0; i < 4; ++i) clip_of.push_back(2);
  const auto split = split_windows(clip_of, 0.25);
  EXPECT_EQ(split.held_out, (std::vector<int64_t>{2, 6, 10, 15}));  // windows 2, 6, 10 of clip 0; 2 of clip 2
  EXPECT_EQ(split.train.size() + split.held_out.size(), clip_of.size());
  EXPECT_NE(std::find(split.train.begin(), split.train.end(), 12), split.train.end()) << "a one-window clip trains";
  // Balanced: clip 0's 9 training windows once, clip 1's one window 9 times, clip 2's three 3 times.
  std::vector<int64_t> train_clips;
  for (int64_t i : split.train) train_clips.push_back(clip_of[i]);
  const auto schedule = balanced_schedule(train_clips);
  std::map<int64_t, int64_t> per_clip;
  for (int64_t p : schedule) ++per_clip[train_clips[p]];
  EXPECT_EQ(per_clip[0], 9);
  EXPECT_EQ(per_clip[1], 9);
  EXPECT_EQ(per_clip[2], 9);
  EXPECT_EQ(schedule.size(), 27u);
  auto msg = colossal::testing::error_message_of([&] { split_windows(clip_of, 1.5); });
  EXPECT_NE(msg.find("held-out fraction 1.5: expected in (0, 1)"), std::string::npos) << msg;
}

TEST(ClipData, BadRowsAreNamed) {
  const std::string path = ::testing::TempDir() + "bad_" + std::to_string(::getpid()) + ".csv";
  std::ofstream(path) << "path,text,num_frames,height,width,fps\nclip.mp4,a cat,12,64,64,8\nclip.mp4,\"unclosed,1,2,3,4\n";
  auto msg = colossal::testing::error_message_of([&] { read_clip_csv(path); });
  EXPECT_NE(msg.find("'" + path + "' line 3: a quote is not closed"), std::string::npos) << msg;
  std::ofstream(path) << "path,text,num_frames,height,width,fps\nclip.mp4,a cat,twelve,64,64,8\n";
  msg = colossal::testing::error_message_of([&] { read_clip_csv(path); });
  EXPECT_NE(msg.find("line 2: num_frames 'twelve': expected a positive number"), std::string::npos) << msg;
  std::ofstream(path) << "file,caption\n";
  msg = colossal::testing::error_message_of([&] { read_clip_csv(path); });
  EXPECT_NE(msg.find("line 1: expected the header path,text,num_frames,height,width,fps"), std::string::npos) << msg;
  // A clip shorter than one window.
  auto clips = read_clip_csv(default_clip_csv());
  msg = colossal::testing::error_message_of([&] { load_windows({clips[1]}, {.frames = 40, .frame_stride = 1}); });
  EXPECT_NE(msg.find("realshort.mp4' gives 36 frames at stride 1, fewer than one window of 40"), std::string::npos) << msg;
}

TEST(LatentCache, WrittenMappedAndRefusedWhenStale) {
  const std::string dir = ::testing::TempDir() + "latent_cache_" + std::to_string(::getpid());
  const std::string path = dir + ".safetensors", csv = dir + ".csv", clip = dir + ".clip";
  std::ofstream(clip) << "not really a clip";
  std::ofstream(csv) << "path,text\n" << clip << ",a clip\n";
  torch::manual_seed(0);
  torch::nn::Linear vae(3, 4);
  const auto key = latent_cache_key(weights_fingerprint(*vae), clip_fingerprint(csv, {clip}));
  LatentCache cache;
  cache.train = {torch::randn({3, 4, 2, 2, 2}), {"a", "b", "c"}, {0, 0, 1}};
  cache.held_out = {torch::randn({1, 4, 2, 2, 2}), {"held"}, {1}};
  cache.scale = 0.123456789;
  write_latent_cache(path, key, cache);

  std::string why;
  const auto back = open_latent_cache(path, key, &why);
  ASSERT_TRUE(back.has_value()) << why;
  EXPECT_TRUE(torch::equal(back->train.latents, cache.train.latents));
  EXPECT_TRUE(torch::equal(back->held_out.latents, cache.held_out.latents));
  EXPECT_EQ(back->train.captions, cache.train.captions);
  EXPECT_EQ(back->held_out.captions, cache.held_out.captions);
  EXPECT_EQ(back->train.clips, cache.train.clips);
  EXPECT_EQ(back->scale, cache.scale);

  // Other weights, or a clip changed on disk: the key differs, the cache is not used.
  {
    torch::NoGradGuard no_grad;
    vae->weight[0][0].add_(1e-3);
  }
  EXPECT_FALSE(open_latent_cache(path, latent_cache_key(weights_fingerprint(*vae), clip_fingerprint(csv, {clip})), &why));
  EXPECT_NE(why.find("is stale: its vae differs"), std::string::npos) << why;
  std::ofstream(clip, std::ios::app) << " with more bytes";
  EXPECT_FALSE(open_latent_cache(path, latent_cache_key(key["vae"], clip_fingerprint(csv, {clip})), &why));
  EXPECT_NE(why.find("is stale: its data differs"), std::string::npos) << why;
  EXPECT_FALSE(open_latent_cache(dir + ".missing", key, &why));
  EXPECT_NE(why.find("no cache at"), std::string::npos) << why;
  auto msg = colossal::testing::error_message_of([&] { clip_fingerprint(csv, {dir + ".gone"}); });
  EXPECT_NE(msg.find("cannot stat the clip '" + dir + ".gone'"), std::string::npos) << msg;

  // A damaged file is an error naming it, not a silent miss.
  std::ofstream(path, std::ios::binary | std::ios::trunc) << "garbage";
  msg = colossal::testing::error_message_of([&] { open_latent_cache(path, key, &why); });
  EXPECT_NE(msg.find(path), std::string::npos) << msg;
}

}  // namespace sora_data_test
