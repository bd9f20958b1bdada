#pragma once
// Video in and out through FFmpeg's libraries (libavformat, libavcodec, libswscale):
//
//   auto info = probe_video("clip.mp4");                       // size, fps, frames, codec
//   auto frames = read_video("clip.mp4", {.num_frames = 16, .stride = 2, .height = 64, .width = 64});
//   write_video("out.mp4", frames, {.fps = 8});                 // H.264, yuv420p
//
// Frames are uint8 tensors [T, H, W, 3] in RGB. Decoding reads any container and codec FFmpeg
// reads; resizing scales the shorter side to the target and crops the centre (the aspect ratio
// is kept). Encoding writes H.264 in yuv420p (what every player opens) to a temporary name and
// renames it when complete. Every failure names the file: one FFmpeg cannot open, one with no
// video stream, and a truncated one (fewer frames decodable than its header promises).
#include <torch/types.h>

#include <cstdint>
#include <string>

namespace colossal::sora {

struct VideoInfo {
  int64_t width = 0, height = 0;
  double fps = 0;
  int64_t frames = 0;  // from the header (or duration x fps); 0 when the container does not say
  double duration_s = 0;
  std::string codec;
};

struct DecodeOptions {
  int64_t start_frame = 0;
  int64_t num_frames = -1;  // -1: to the end
  int64_t stride = 1;       // keep every stride-th frame
  int64_t height = 0, width = 0;  // 0 and 0: the clip's own size
  void validate() const;
};

struct EncodeOptions {
  double fps = 8;
  int crf = 18;                    // x264 quality: 0 lossless .. 51 worst; 18 is visually lossless
  std::string preset = "medium";
  void validate() const;
};

VideoInfo probe_video(const std::string& path);

/// Frames [T, H, W, 3] uint8 RGB; `info` (optional) receives the clip's own properties.
torch::Tensor read_video(const std::string& path, const DecodeOptions& options = {}, VideoInfo* info = nullptr);

/// Writes frames [T, H, W, 3] uint8 RGB (H and W even) as an H.264 .mp4.
void write_video(const std::string& path, const torch::Tensor& frames, const EncodeOptions& options = {});

}  // namespace colossal::sora
