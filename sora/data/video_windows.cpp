#include "sora/data/video_windows.h"

#include <torch/torch.h>

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
  for (const auto& clip : clips) {
    const auto frames = read_video(clip.path, {.stride = o.frame_stride, .height = o.height, .width = o.width});
    COLOSSAL_CHECK(frames.size(0) >= o.frames, "[windows] '", clip.path, "' gives ", frames.size(0),
                   " frames at stride ", o.frame_stride, ", fewer than one window of ", o.frames);
    for (int64_t start = 0; start + o.frames <= frames.size(0); start += step) {
      windows.push_back(frames.narrow(0, start, o.frames));
      out.captions.push_back(clip.text);
      out.origins.push_back(clip.path + " @ frame " + std::to_string(start * o.frame_stride));
    }
  }
  out.videos = torch::stack(windows);
  return out;
}

}  // namespace colossal::sora
