#include "sora/io/contact_sheet.h"

#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <torch/torch.h>

#include "core/common/check.h"

namespace colossal::sora {

void write_contact_sheet(const std::string& path, const torch::Tensor& frames, const ContactSheetOptions& o) {
  COLOSSAL_CHECK(o.columns >= 1 && o.scale >= 1 && o.gap >= 0, "[contact sheet] columns ", o.columns, ", scale ",
                 o.scale, ", gap ", o.gap, ": expected >= 1, >= 1, >= 0");
  COLOSSAL_CHECK((frames.dim() == 4 || frames.dim() == 5) && frames.size(-1) == 3 &&
                     frames.scalar_type() == torch::kUInt8,
                 "[contact sheet] '", path, "': expected uint8 frames [T, H, W, 3] or [N, T, H, W, 3], got ",
                 frames.sizes(), " ", frames.scalar_type());
  const auto clips = frames.dim() == 4 ? frames.unsqueeze(0) : frames;
  const int64_t n = clips.size(0), t = clips.size(1), h = clips.size(2) * o.scale, w = clips.size(3) * o.scale;
  const int64_t cols = std::min<int64_t>(o.columns, t), rows_per_clip = (t + cols - 1) / cols;
  const int64_t rows = n * rows_per_clip;
  cv::Mat sheet(static_cast<int>(rows * (h + o.gap) + o.gap), static_cast<int>(cols * (w + o.gap) + o.gap), CV_8UC3,
                cv::Scalar(255, 255, 255));
  for (int64_t c = 0; c < n; ++c)
    for (int64_t f = 0; f < t; ++f) {
      const auto frame = clips[c][f].contiguous();
      cv::Mat rgb(static_cast<int>(frame.size(0)), static_cast<int>(frame.size(1)), CV_8UC3, frame.data_ptr<uint8_t>());
      cv::Mat bgr, big;
      cv::cvtColor(rgb, bgr, cv::COLOR_RGB2BGR);
      cv::resize(bgr, big, cv::Size(static_cast<int>(w), static_cast<int>(h)), 0, 0, cv::INTER_NEAREST);
      const int64_t row = c * rows_per_clip + f / cols, col = f % cols;
      big.copyTo(sheet(cv::Rect(static_cast<int>(o.gap + col * (w + o.gap)), static_cast<int>(o.gap + row * (h + o.gap)),
                                static_cast<int>(w), static_cast<int>(h))));
    }
  COLOSSAL_CHECK(cv::imwrite(path, sheet), "[contact sheet] cannot write '", path, "'");
}

}  // namespace colossal::sora
