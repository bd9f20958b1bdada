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
  std::vector<int64_t> clips;         // per window: its clip's row in the CSV
  int64_t size() const { return videos.defined() ? videos.size(0) : 0; }
};

/// Throws naming the clip when it is shorter than one window.
VideoWindows load_windows(const std::vector<ClipEntry>& clips, const WindowOptions& options);

/// The rows of `windows` (in order) that train and those held out for evaluation.
struct WindowSplit {
  std::vector<int64_t> train, held_out;
};

/// Every n-th window of each clip held out (n = round(1 / held_out_fraction), at least 2,
/// counted from the clip's middle of the first n), so a clip with several windows is in both
/// parts and a clip with one window still trains. `clip_of_window`: VideoWindows::clips.
WindowSplit split_windows(const std::vector<int64_t>& clip_of_window, double held_out_fraction);

/// The windows one epoch visits when clips are balanced: each clip's windows repeated
/// round(most / its count) times (at least once), where `most` is the largest clip's count, so a
/// short clip is seen about as often as a long one. Returns positions into `clip_of_window`.
std::vector<int64_t> balanced_schedule(const std::vector<int64_t>& clip_of_window);

}  // namespace colossal::sora
