#include "apps/colossal/plot_command.h"

#include <nlohmann/json.hpp>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>

#include "core/common/check.h"
#include "core/common/fs.h"

namespace colossal::apps {
namespace {

struct Series {
  std::vector<double> x, y;  // step, value
};

// Training lines carry "step" and the metrics; event lines ("eval", "checkpoint") are plotted
// as their own series, named "eval loss" and so on.
std::map<std::string, Series> read_log(const std::string& path) {
  std::ifstream in(path);
  COLOSSAL_CHECK(in.good(), "[plot] cannot read '", path, "'");
  std::map<std::string, Series> out;
  std::string line;
  int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    COLOSSAL_CHECK(!j.is_discarded() && j.is_object(), "[plot] '", path, "' line ", number, ": not a JSON object");
    if (!j.contains("step") || !j["step"].is_number()) continue;
    const double step = j["step"].get<double>();
    const std::string prefix = j.contains("event") ? j["event"].get<std::string>() + " " : "";
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!it.value().is_number() || it.key() == "step") continue;
      auto& s = out[prefix + it.key()];
      s.x.push_back(step);
      s.y.push_back(it.value().get<double>());
    }
  }
  return out;
}

std::string tick(double v) {
  char buf[32];
  const double a = std::fabs(v);
  if (a != 0 && (a < 1e-2 || a >= 1e5)) std::snprintf(buf, sizeof buf, "%.2e", v);
  else std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

// A line chart with axes, five ticks a side, the title and the last value.
void draw(const std::string& title, const std::vector<const Series*>& series, const std::vector<std::string>& labels,
          const std::string& file) {
  const int W = 900, H = 520, left = 100, right = 30, top = 50, bottom = 60;
  cv::Mat img(H, W, CV_8UC3, cv::Scalar(255, 255, 255));
  double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
  for (const Series* s : series) {
    for (size_t i = 0; i < s->x.size(); ++i) {
      if (!std::isfinite(s->y[i])) continue;
      x0 = std::min(x0, s->x[i]);
      x1 = std::max(x1, s->x[i]);
      y0 = std::min(y0, s->y[i]);
      y1 = std::max(y1, s->y[i]);
    }
  }
  if (x1 <= x0) x1 = x0 + 1;
  if (y1 <= y0) {
    y0 -= 0.5 * (std::fabs(y0) + 1e-12);
    y1 += 0.5 * (std::fabs(y1) + 1e-12);
  }
  const double pad = 0.05 * (y1 - y0);
  y0 -= pad;
  y1 += pad;
  auto px = [&](double x) { return left + static_cast<int>((x - x0) / (x1 - x0) * (W - left - right)); };
  auto py = [&](double y) { return H - bottom - static_cast<int>((y - y0) / (y1 - y0) * (H - top - bottom)); };
  const cv::Scalar ink(40, 40, 40), grid(225, 225, 225);
  for (int k = 0; k <= 5; ++k) {
    const double yv = y0 + (y1 - y0) * k / 5;
    const double xv = x1 - x0 >= 5 ? std::round(x0 + (x1 - x0) * k / 5) : x0 + (x1 - x0) * k / 5;  // whole steps
    cv::line(img, {left, py(yv)}, {W - right, py(yv)}, grid, 1);
    cv::line(img, {px(xv), top}, {px(xv), H - bottom}, grid, 1);
    cv::putText(img, tick(yv), {8, py(yv) + 5}, cv::FONT_HERSHEY_SIMPLEX, 0.45, ink, 1, cv::LINE_AA);
    cv::putText(img, tick(xv), {px(xv) - 15, H - bottom + 22}, cv::FONT_HERSHEY_SIMPLEX, 0.45, ink, 1,
                cv::LINE_AA);
  }
  cv::rectangle(img, {left, top}, {W - right, H - bottom}, ink, 1);
  cv::putText(img, "step", {W / 2 - 15, H - 15}, cv::FONT_HERSHEY_SIMPLEX, 0.5, ink, 1, cv::LINE_AA);
  const cv::Scalar colors[] = {{180, 100, 30}, {40, 40, 200}, {40, 150, 40}, {150, 40, 150}};
  std::string heading = title;
  for (size_t k = 0; k < series.size(); ++k) {
    const Series& s = *series[k];
    std::vector<cv::Point> pts;
    for (size_t i = 0; i < s.x.size(); ++i)
      if (std::isfinite(s.y[i])) pts.emplace_back(px(s.x[i]), py(s.y[i]));
    const cv::Scalar c = colors[k % 4];
    if (pts.size() > 1) cv::polylines(img, pts, false, c, 2, cv::LINE_AA);
    for (const auto& p : pts)
      if (pts.size() < 60) cv::circle(img, p, 3, c, cv::FILLED, cv::LINE_AA);
    if (!s.y.empty()) heading += "   " + labels[k] + " last " + tick(s.y.back());
  }
  cv::putText(img, heading, {left, 32}, cv::FONT_HERSHEY_SIMPLEX, 0.6, ink, 1, cv::LINE_AA);
  COLOSSAL_CHECK(cv::imwrite(file, img), "[plot] cannot write '", file, "'");
}

std::string file_name(const std::string& metric) {
  std::string out;
  for (char ch : metric) out += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return out + ".png";
}

}  // namespace

CLI::App* add_plot_command(CLI::App& app, PlotArgs& a) {
  auto* cmd = app.add_subcommand("plot", "write PNG charts (loss, learning rate, tokens/s, memory...) of a training "
                                         "app's --log_file");
  cmd->add_option("log_file", a.log_file, "the JSON-lines metrics file")->required();
  cmd->add_option("--out", a.out_dir, "directory for the PNGs (default: <log_file>_plots)");
  cmd->add_option("--metrics", a.metrics, "metrics to chart (eval lines add 'eval loss')")->capture_default_str();
  return cmd;
}

int run_plot(const PlotArgs& a) {
  const auto series = read_log(a.log_file);
  COLOSSAL_CHECK(!series.empty(), "[plot] '", a.log_file, "' has no training lines (JSON objects with a step and metrics)");
  std::string dir = a.out_dir.empty() ? a.log_file + "_plots" : a.out_dir;
  fs::make_dirs(dir);
  std::vector<std::string> known;
  for (const auto& [name, s] : series) known.push_back(name);
  int written = 0;
  for (const auto& metric : a.metrics) {
    auto it = series.find(metric);
    if (it == series.end()) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      std::cerr << "colossal plot: no '" << metric << "' in " << a.log_file << " (it has: " << list << ")\n";
      continue;
    }
    std::vector<const Series*> lines = {&it->second};
    std::vector<std::string> labels = {"train"};
    if (auto ev = series.find("eval " + metric); ev != series.end()) {  // evaluation beside training
      lines.push_back(&ev->second);
      labels.push_back("eval");
    }
    const std::string file = dir + "/" + file_name(metric);
    draw(metric, lines, labels, file);
    std::cout << "wrote " << file << " (" << it->second.x.size() << " points)\n";
    ++written;
  }
  COLOSSAL_CHECK(written > 0, "[plot] none of the asked metrics is in '", a.log_file, "'");
  return 0;
}

}  // namespace colossal::apps
