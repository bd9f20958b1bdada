#include "sora/data/video_windows.h"

#include <torch/torch.h>

#include <cmath>
#include <map>

#include "core/common/check.h"
#include "sora/io/video.h"

namespace colossal::sora {

void WindowOptions::validate() const {
  COLOSSAL_CHECK(frames >= 1 && frame_stride >= 1 && step >= 0, "[windows] frames ", frames, ", frame_stride ",
                 frame_stride, ", step ", step, ": expected >= 1, >= 1, >= 0");
  COLOSSAL_CHECK(height >= 2 && width >= 2, "[windows] size ", height, "x", width, ": expected at least 2x2");
}

VideoWindows load_windows(const std::vector<ClipEntry>& clips, const WindowOptions& o) {
  o.validate();
  const int64_t step = o.step > 0 ? o.step : o.frames;
  VideoWindows out;
  std::vector<torch::Tensor> windows;
  for (size_t c = 0; c < clips.size(); ++c) {
    const auto& clip = clips[c];
    const auto frames = read_video(clip.path, {.stride = o.frame_stride, .height = o.height, .width = o.width});
    COLOSSAL_CHECK(frames.size(0) >= o.frames, "[windows] '", clip.path, "' gives ", frames.size(0),
                   " frames at stride ", o.frame_stride, ", fewer than one window of ", o.frames);
    for (int64_t start = 0; start + o.frames <= frames.size(0); start += step) {
      windows.push_back(frames.narrow(0, start, o.frames));
      out.captions.push_back(clip.text);
      out.origins.push_back(clip.path + " @ frame " + std::to_string(start * o.frame_stride));
      out.clips.push_back(static_cast<int64_t>(c));
    }
  }
  out.videos = torch::stack(windows);
  return out;
}

WindowSplit split_windows(const std::vector<int64_t>& clip_of_window, double held_out_fraction) {
  COLOSSAL_CHECK(held_out_fraction > 0 && held_out_fraction < 1, "[windows] held-out fraction ", held_out_fraction,
                 ": expected in (0, 1)");
  const int64_t every = std::max<int64_t>(2, static_cast<int64_t>(std::lround(1 / held_out_fraction)));
  WindowSplit split;
  std::map<int64_t, int64_t> seen;  // windows so far per clip
  for (size_t i = 0; i < clip_of_window.size(); ++i) {
    const int64_t j = seen[clip_of_window[i]]++;
    (j % every == every / 2 ? split.held_out : split.train).push_back(static_cast<int64_t>(i));
  }
  return split;
}

std::vector<int64_t> balanced_schedule(const std::vector<int64_t>& clip_of_window) {
  std::map<int64_t, int64_t> count;
  for (int64_t c : clip_of_window) ++count[c];
  int64_t most = 0;
  for (const auto& [clip, n] : count) most = std::max(most, n);
  std::vector<int64_t> schedule;
  for (size_t i = 0; i < clip_of_window.size(); ++i) {
    const int64_t n = count[clip_of_window[i]];
    const int64_t repeats = std::max<int64_t>(1, std::lround(static_cast<double>(most) / n));
    for (int64_t r = 0; r < repeats; ++r) schedule.push_back(static_cast<int64_t>(i));
  }
  return schedule;
}

}  // namespace colossal::sora
