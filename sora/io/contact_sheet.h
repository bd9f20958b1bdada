#pragma once
// A contact sheet: a video's frames tiled in a grid in one PNG, so a clip can be judged at a
// glance (beside every generated video, and in notes and READMEs where a video cannot play).
#include <torch/types.h>

#include <string>

namespace colossal::sora {

struct ContactSheetOptions {
  int columns = 8;
  int scale = 1;  // each frame enlarged this many times (nearest neighbour: small clips stay sharp)
  int gap = 2;    // pixels between frames
};

/// Writes frames [T, H, W, 3] uint8 RGB (or several clips [N, T, H, W, 3], one row block each)
/// as a PNG at `path`.
void write_contact_sheet(const std::string& path, const torch::Tensor& frames, const ContactSheetOptions& options = {});

}  // namespace colossal::sora
