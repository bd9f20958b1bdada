#pragma once
// Training samples from clips: each clip decoded once at the training size and frame stride,
// then cut into fixed-length windows (non-overlapping unless a step is given), each with its
// clip's caption.
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "sora/data/clip_csv.h"

namespace colossal::sora {

struct WindowOptions {
  int64_t frames = 8;        // per window
  int64_t frame_stride = 2;  // keep every n-th frame of the clip
  int64_t height = 32, width = 32;
  int64_t step = 0;          // kept frames between window starts (0: `frames`, no overlap)
  void validate() const;
};

struct VideoWindows {
  torch::Tensor videos;               // [N, T, H, W, 3] uint8
  std::vector<std::string> captions;  // per window
  std::vector<std::string> origins;   // per window: "clip path @ first frame"
  int64_t size() const { return videos.defined() ? videos.size(0) : 0; }
};

/// Throws naming the clip when it is shorter than one window.
VideoWindows load_windows(const std::vector<ClipEntry>& clips, const WindowOptions& options);

}  // namespace colossal::sora
