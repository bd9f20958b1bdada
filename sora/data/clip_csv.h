#pragma once
// Video datasets in Open-Sora's CSV format: a header line, then one clip per line,
//   path,text,num_frames,height,width,fps
// (text in double quotes when it holds a comma or a quote; a quote inside doubled). Relative
// paths are taken from the CSV's directory. The built-in dataset is the real clips setup unpacks
// (imageio's cockatoo and realshort, OpenCV's vtest), with short captions; its CSV is written
// beside them, from the clips' own headers, the first time it is asked for.
#include <cstdint>
#include <string>
#include <vector>

namespace colossal::sora {

struct ClipEntry {
  std::string path, text;
  int64_t num_frames = 0, height = 0, width = 0;
  double fps = 0;
};

/// Throws naming the file, the line and the field for a malformed row.
std::vector<ClipEntry> read_clip_csv(const std::string& path);
void write_clip_csv(const std::string& path, const std::vector<ClipEntry>& clips);

/// The built-in dataset's CSV (written on first use; throws naming the missing clip when setup
/// has not unpacked the clips).
std::string default_clip_csv();

}  // namespace colossal::sora
