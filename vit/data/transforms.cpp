#include "vit/data/transforms.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <opencv2/imgproc.hpp>
#include <random>

#include "core/common/check.h"

namespace colossal::vit {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

double uniform(std::mt19937_64& rng, double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); }

cv::Mat to_channels(const cv::Mat& m, int channels) {
  if (m.channels() == channels) return m;
  cv::Mat out;
  if (channels == 3) cv::cvtColor(m, out, m.channels() == 4 ? cv::COLOR_RGBA2RGB : cv::COLOR_GRAY2RGB);
  else cv::cvtColor(m, out, m.channels() == 4 ? cv::COLOR_RGBA2GRAY : cv::COLOR_RGB2GRAY);
  return out;
}

// The crop box of torchvision's RandomResizedCrop.
cv::Rect random_crop_box(const cv::Mat& m, const TransformOptions& o, std::mt19937_64& rng) {
  const double area = static_cast<double>(m.rows) * m.cols;
  const double log_lo = std::log(o.crop_min_ratio), log_hi = std::log(o.crop_max_ratio);
  for (int attempt = 0; attempt < 10; ++attempt) {
    double target = area * uniform(rng, o.crop_min_scale, o.crop_max_scale);
    double ratio = std::exp(uniform(rng, log_lo, log_hi));
    int w = static_cast<int>(std::lround(std::sqrt(target * ratio)));
    int h = static_cast<int>(std::lround(std::sqrt(target / ratio)));
    if (w > 0 && h > 0 && w <= m.cols && h <= m.rows) {
      int y = std::uniform_int_distribution<int>(0, m.rows - h)(rng);
      int x = std::uniform_int_distribution<int>(0, m.cols - w)(rng);
      return {x, y, w, h};
    }
  }
  // Fallback: the largest centred box within the ratio range.
  double in_ratio = static_cast<double>(m.cols) / m.rows;
  int w = m.cols, h = m.rows;
  if (in_ratio < o.crop_min_ratio) h = static_cast<int>(std::lround(w / o.crop_min_ratio));
  else if (in_ratio > o.crop_max_ratio) w = static_cast<int>(std::lround(h * o.crop_max_ratio));
  return {(m.cols - w) / 2, (m.rows - h) / 2, w, h};
}

cv::Mat gray_of(const cv::Mat& m) {
  if (m.channels() == 1) return m;
  cv::Mat g, back;
  cv::cvtColor(m, g, cv::COLOR_RGB2GRAY);
  cv::cvtColor(g, back, cv::COLOR_GRAY2RGB);
  return back;
}

// out = a * f + b * (1 - f), saturated to 8 bits: PIL's ImageEnhance blends.
cv::Mat blend(const cv::Mat& a, const cv::Mat& b, double f) {
  cv::Mat out;
  cv::addWeighted(a, f, b, 1.0 - f, 0.0, out);
  return out;
}

cv::Mat per_channel(const cv::Mat& m, const std::function<cv::Mat(const cv::Mat&)>& fn) {
  std::vector<cv::Mat> planes;
  cv::split(m, planes);
  for (auto& p : planes) p = fn(p);
  cv::Mat out;
  cv::merge(planes, out);
  return out;
}

// One RandAugment colour operation at magnitude m (0..10); `sign` flips the enhancement ones.
cv::Mat colour_op(const cv::Mat& img, int op, double m, bool negative) {
  const double f = 1.0 + (negative ? -1 : 1) * 0.09 * m;  // enhancement factor, 0.1..1.9 at m = 10
  switch (op) {
    case 0: return blend(img, cv::Mat::zeros(img.size(), img.type()), f);  // brightness
    case 1: {                                                                // contrast
      cv::Mat g = gray_of(img);
      cv::Mat mean(img.size(), img.type(), cv::Scalar::all(cv::mean(g)[0]));
      return blend(img, mean, f);
    }
    case 2: return blend(img, gray_of(img), f);  // colour (saturation)
    case 3: {                                    // sharpness: against PIL's smoothing kernel
      cv::Mat kernel = (cv::Mat_<float>(3, 3) << 1, 1, 1, 1, 5, 1, 1, 1, 1) / 13.0f, smooth;
      cv::filter2D(img, smooth, -1, kernel);
      return blend(img, smooth, f);
    }
    case 4: {  // posterize: keep 8 - round(4 m / 10) bits
      int bits = 8 - static_cast<int>(std::lround(4 * m / 10));
      uchar mask = static_cast<uchar>(0xff << (8 - bits));
      cv::Mat out;
      cv::bitwise_and(img, cv::Scalar::all(mask), out);
      return out;
    }
    case 5: {  // solarize: invert everything at or above 255 (1 - m/10)
      const double threshold = 255.0 * (1.0 - m / 10.0);
      cv::Mat lut(1, 256, CV_8U), out;
      for (int v = 0; v < 256; ++v) lut.at<uchar>(v) = static_cast<uchar>(v >= threshold ? 255 - v : v);
      cv::LUT(img, lut, out);
      return out;
    }
    case 6:  // autocontrast: each channel stretched to 0..255
      return per_channel(img, [](const cv::Mat& p) {
        cv::Mat out;
        cv::normalize(p, out, 0, 255, cv::NORM_MINMAX);
        return out;
      });
    case 7:  // equalize
      return per_channel(img, [](const cv::Mat& p) {
        cv::Mat out;
        cv::equalizeHist(p, out);
        return out;
      });
    default: return img;  // identity
  }
}

// [H, W, C] uint8 -> [C, H, W] normalised floats.
void normalise_into(const cv::Mat& m, const TransformOptions& o, float* out) {
  const int c = m.channels(), h = m.rows, w = m.cols;
  for (int k = 0; k < c; ++k) {
    const double mean = o.mean.size() == 1 ? o.mean[0] : o.mean[k];
    const double std = o.std.size() == 1 ? o.std[0] : o.std[k];
    const float scale = static_cast<float>(1.0 / (255.0 * std)), shift = static_cast<float>(-mean / std);
    float* plane = out + static_cast<size_t>(k) * h * w;
    for (int y = 0; y < h; ++y) {
      const uchar* row = m.ptr<uchar>(y);
      for (int x = 0; x < w; ++x) plane[y * w + x] = row[x * c + k] * scale + shift;
    }
  }
}

cv::Mat resize_to(const cv::Mat& m, int size) {
  if (m.rows == size && m.cols == size) return m;
  cv::Mat out;
  cv::resize(m, out, cv::Size(size, size), 0, 0, m.rows > size ? cv::INTER_AREA : cv::INTER_LINEAR);
  return out;
}

}  // namespace

void TransformOptions::validate() const {
  COLOSSAL_CHECK(image_size >= 1, "[transforms] image_size: expected >= 1, got ", image_size);
  COLOSSAL_CHECK(channels == 1 || channels == 3, "[transforms] channels: expected 1 or 3, got ", channels);
  COLOSSAL_CHECK(crop_min_scale > 0 && crop_min_scale <= crop_max_scale && crop_max_scale <= 1,
                 "[transforms] crop scale: expected 0 < min <= max <= 1, got ", crop_min_scale, "..", crop_max_scale);
  COLOSSAL_CHECK(crop_min_ratio > 0 && crop_min_ratio <= crop_max_ratio, "[transforms] crop ratio: expected 0 < min <= max, got ",
                 crop_min_ratio, "..", crop_max_ratio);
  COLOSSAL_CHECK(randaugment_ops >= 0 && randaugment_magnitude >= 0 && randaugment_magnitude <= 10,
                 "[transforms] RandAugment: expected ops >= 0 and magnitude in 0..10, got ", randaugment_ops, " and ",
                 randaugment_magnitude);
  for (const auto* v : {&mean, &std})
    COLOSSAL_CHECK(v->size() == 1 || static_cast<int>(v->size()) == channels, "[transforms] mean/std: expected 1 or ",
                   channels, " values, got ", v->size());
  for (double s : std) COLOSSAL_CHECK(s > 0, "[transforms] std: expected > 0, got ", s);
}

uint64_t sample_seed(uint64_t seed, int64_t epoch, int64_t index) {
  return mix(mix(mix(seed) ^ static_cast<uint64_t>(epoch)) ^ static_cast<uint64_t>(index));
}

void transform_train(const cv::Mat& image, const TransformOptions& o, uint64_t seed, float* out) {
  std::mt19937_64 rng(seed);
  const int size = static_cast<int>(o.image_size);
  cv::Mat m = to_channels(image, o.channels);
  if (o.random_resized_crop) {
    cv::Mat crop = m(random_crop_box(m, o, rng));
    cv::resize(crop, m, cv::Size(size, size), 0, 0, cv::INTER_LINEAR);
  } else {
    m = resize_to(m, size);
  }
  if (o.horizontal_flip && std::uniform_int_distribution<int>(0, 1)(rng) == 1) {
    cv::Mat flipped;
    cv::flip(m, flipped, 1);
    m = flipped;
  }
  for (int i = 0; i < o.randaugment_ops; ++i) {
    int op = std::uniform_int_distribution<int>(0, 8)(rng);
    bool negative = std::uniform_int_distribution<int>(0, 1)(rng) == 1;
    m = colour_op(m, op, o.randaugment_magnitude, negative);
  }
  if (!m.isContinuous()) m = m.clone();
  normalise_into(m, o, out);
}

void transform_eval(const cv::Mat& image, const TransformOptions& o, float* out) {
  const int size = static_cast<int>(o.image_size);
  cv::Mat m = to_channels(image, o.channels);
  if (m.rows != m.cols) {  // shorter side to `size`, then the centre
    double s = static_cast<double>(size) / std::min(m.rows, m.cols);
    cv::Mat r;
    cv::resize(m, r, cv::Size(std::max(size, static_cast<int>(std::lround(m.cols * s))),
                              std::max(size, static_cast<int>(std::lround(m.rows * s)))),
               0, 0, s < 1 ? cv::INTER_AREA : cv::INTER_LINEAR);
    m = r(cv::Rect((r.cols - size) / 2, (r.rows - size) / 2, size, size)).clone();
  } else {
    m = resize_to(m, size);
  }
  normalise_into(m, o, out);
}

}  // namespace colossal::vit
