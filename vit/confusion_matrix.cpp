#include "vit/confusion_matrix.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <sstream>

#include "core/checkpoint/atomic_file.h"
#include "core/common/check.h"

namespace colossal::vit {

ClassificationCounts::ClassificationCounts(int64_t classes) : confusion(at::zeros({classes, classes}, at::kLong)) {}

void ClassificationCounts::add(const at::Tensor& logits, const at::Tensor& labels, const at::Tensor& loss_per_sample,
                               const std::vector<double>& weight) {
  const int64_t n = labels.size(0), classes = confusion.size(0);
  auto top = std::get<1>(logits.detach().to(at::kFloat).topk(std::min<int64_t>(5, classes), 1)).contiguous();  // [B, k]
  auto lab = labels.to(at::kLong).contiguous();
  auto losses = loss_per_sample.detach().to(at::kDouble).contiguous();
  auto* t = top.data_ptr<int64_t>();
  auto* l = lab.data_ptr<int64_t>();
  auto* c = confusion.data_ptr<int64_t>();
  const int64_t k = top.size(1);
  for (int64_t i = 0; i < n; ++i) {
    if (!weight.empty() && weight[i] == 0) continue;
    samples += 1;
    loss_sum += losses.data_ptr<double>()[i];
    const int64_t truth = l[i];
    c[truth * classes + t[i * k]] += 1;
    if (t[i * k] == truth) top1 += 1;
    for (int64_t j = 0; j < k; ++j)
      if (t[i * k + j] == truth) top5 += 1;
  }
}

at::Tensor ClassificationCounts::pack() const {
  return at::cat({at::tensor({samples, top1, top5, loss_sum}, at::kDouble), confusion.flatten().to(at::kDouble)});
}

void ClassificationCounts::unpack(const at::Tensor& packed) {
  auto p = packed.to(at::kDouble).contiguous();
  samples = p[0].item<double>(), top1 = p[1].item<double>(), top5 = p[2].item<double>(), loss_sum = p[3].item<double>();
  confusion = p.narrow(0, 4, confusion.numel()).round().to(at::kLong).view(confusion.sizes()).clone();
}

namespace {

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return q + "\"";
}

std::vector<std::string> names_for(const at::Tensor& confusion, const std::vector<std::string>& names) {
  std::vector<std::string> out = names;
  for (int64_t i = static_cast<int64_t>(out.size()); i < confusion.size(0); ++i) out.push_back(std::to_string(i));
  return out;
}

}  // namespace

void write_confusion_csv(const at::Tensor& confusion, const std::vector<std::string>& class_names,
                         const std::string& path) {
  auto names = names_for(confusion, class_names);
  auto counts = confusion.to(at::kLong).contiguous();
  auto c = counts.accessor<int64_t, 2>();
  const int64_t n = counts.size(0);
  std::ostringstream s;
  s << "true\\predicted";
  for (int64_t j = 0; j < n; ++j) s << "," << csv_field(names[j]);
  s << "\n";
  for (int64_t i = 0; i < n; ++i) {
    s << csv_field(names[i]);
    for (int64_t j = 0; j < n; ++j) s << "," << c[i][j];
    s << "\n";
  }
  checkpoint::write_text_atomically(path, s.str());
}

void write_confusion_png(const at::Tensor& confusion, const std::vector<std::string>& class_names,
                         const std::string& title, const std::string& path) {
  auto names = names_for(confusion, class_names);
  auto counts = confusion.to(at::kLong).contiguous();
  auto c = counts.accessor<int64_t, 2>();
  const int n = static_cast<int>(counts.size(0));
  const int cell = n <= 20 ? 56 : std::max(12, 1100 / n);  // large class counts: smaller cells
  const bool numbers = cell >= 28;
  const int font = cv::FONT_HERSHEY_SIMPLEX;
  const double label_scale = std::min(0.5, cell / 90.0);
  int label_width = 0;
  for (const auto& name : names) {
    int base = 0;
    label_width = std::max(label_width, cv::getTextSize(name, font, label_scale, 1, &base).width);
  }
  const int margin = 12, left = label_width + 2 * margin + 22, top = 56, grid = n * cell;
  const int width = left + grid + margin, height = top + grid + label_width + 2 * margin + 22;
  cv::Mat image(height, width, CV_8UC3, cv::Scalar(255, 255, 255));

  // Colours: each row's share of its true class, through the viridis map.
  cv::Mat share(n, n, CV_8U);
  for (int i = 0; i < n; ++i) {
    int64_t row_total = 0;
    for (int j = 0; j < n; ++j) row_total += c[i][j];
    for (int j = 0; j < n; ++j)
      share.at<uchar>(i, j) = static_cast<uchar>(row_total ? 255.0 * c[i][j] / row_total + 0.5 : 0);
  }
  cv::Mat colours;
  cv::applyColorMap(share, colours, cv::COLORMAP_VIRIDIS);
  for (int i = 0; i < n; ++i)
    for (int j = 0; j < n; ++j) {
      cv::Rect r(left + j * cell, top + i * cell, cell, cell);
      cv::rectangle(image, r, cv::Scalar(colours.at<cv::Vec3b>(i, j)), cv::FILLED);
      if (!numbers) continue;
      std::string text = std::to_string(c[i][j]);
      double scale = 0.45;
      int base = 0;
      auto size = cv::getTextSize(text, font, scale, 1, &base);
      if (size.width > cell - 4) scale *= (cell - 4.0) / size.width, size = cv::getTextSize(text, font, scale, 1, &base);
      cv::Scalar ink = share.at<uchar>(i, j) > 150 ? cv::Scalar(0, 0, 0) : cv::Scalar(255, 255, 255);
      cv::putText(image, text, {r.x + (cell - size.width) / 2, r.y + (cell + size.height) / 2}, font, scale, ink, 1,
                  cv::LINE_AA);
    }
  cv::rectangle(image, cv::Rect(left, top, grid, grid), cv::Scalar(60, 60, 60), 1);
  // True classes down the left, predicted classes along the bottom (written vertically).
  for (int i = 0; i < n; ++i) {
    int base = 0;
    auto size = cv::getTextSize(names[i], font, label_scale, 1, &base);
    cv::putText(image, names[i], {left - margin - size.width, top + i * cell + (cell + size.height) / 2}, font,
                label_scale, cv::Scalar(0, 0, 0), 1, cv::LINE_AA);
  }
  // Column labels: drawn right-aligned in horizontal bands, then turned a quarter anticlockwise so
  // they read upwards and end at the grid, under their columns.
  cv::Mat column_labels(cell * n, label_width + margin, CV_8UC3, cv::Scalar(255, 255, 255));
  for (int j = 0; j < n; ++j) {
    int base = 0;
    auto size = cv::getTextSize(names[j], font, label_scale, 1, &base);
    cv::putText(column_labels, names[j], {column_labels.cols - margin / 2 - size.width, j * cell + (cell + size.height) / 2},
                font, label_scale, cv::Scalar(0, 0, 0), 1, cv::LINE_AA);
  }
  cv::Mat turned;
  cv::rotate(column_labels, turned, cv::ROTATE_90_COUNTERCLOCKWISE);
  turned.copyTo(image(cv::Rect(left, top + grid + margin / 2, turned.cols, turned.rows)));
  cv::putText(image, "predicted", {left + grid / 2 - 36, height - 8}, font, 0.5, cv::Scalar(0, 0, 0), 1, cv::LINE_AA);
  cv::Mat side(22, 60, CV_8UC3, cv::Scalar(255, 255, 255)), side_turned;
  cv::putText(side, "true", {10, 16}, font, 0.5, cv::Scalar(0, 0, 0), 1, cv::LINE_AA);
  cv::rotate(side, side_turned, cv::ROTATE_90_COUNTERCLOCKWISE);
  side_turned.copyTo(image(cv::Rect(4, top + grid / 2 - 30, side_turned.cols, side_turned.rows)));
  cv::putText(image, title, {margin, 34}, font, 0.55, cv::Scalar(0, 0, 0), 1, cv::LINE_AA);

  std::vector<uchar> png;
  COLOSSAL_CHECK(cv::imencode(".png", image, png), "[confusion matrix] OpenCV could not encode the PNG for ", path);
  checkpoint::write_text_atomically(path, std::string(png.begin(), png.end()));
}

}  // namespace colossal::vit
