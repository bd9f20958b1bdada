#include "core/common/progress.h"

#include <malloc.h>

#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/common/check.h"
#include "core/common/tensorboard.h"

namespace colossal {

Progress::Progress(Options options) : options_(std::move(options)) {
  if (!options_.enabled) return;
  tty_ = ::isatty(STDERR_FILENO) != 0;
  if (!options_.log_file.empty()) {
    log_.open(options_.log_file, std::ios::app);
    COLOSSAL_CHECK(log_.good(), "cannot open log file '", options_.log_file, "' for appending");
  }
  if (!options_.tensorboard_dir.empty()) tensorboard_ = std::make_unique<TensorBoardWriter>(options_.tensorboard_dir);
}

Progress::~Progress() { end_status_line(); }

void Progress::end_status_line() {
  if (status_open_) std::fputc('\n', stderr);
  status_open_ = false;
}

namespace {
std::string format_value(const std::string& name, double v) {
  char buf[64];
  if (name == "lr" || (std::fabs(v) > 0 && std::fabs(v) < 1e-2)) std::snprintf(buf, sizeof buf, "%.2e", v);
  else if (name == "mfu") std::snprintf(buf, sizeof buf, "%.1f%%", 100 * v);
  else if (std::fabs(v) >= 1000) std::snprintf(buf, sizeof buf, "%.0f", v);
  else std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

nlohmann::json to_json(const std::vector<std::pair<std::string, double>>& metrics) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : metrics) j[k] = std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr);
  return j;
}
}  // namespace

void Progress::step(int64_t step, const std::vector<std::pair<std::string, double>>& metrics,
                    const std::vector<std::pair<std::string, std::vector<double>>>& lists) {
  if (!options_.enabled) return;
  std::string line = "step " + std::to_string(step);
  if (options_.total_steps > 0) {
    line += "/" + std::to_string(options_.total_steps) + " [";
    const int width = 20;
    int done = static_cast<int>(width * step / std::max<int64_t>(1, options_.total_steps));
    for (int i = 0; i < width; ++i) line += i < done ? '=' : (i == done ? '>' : ' ');
    line += "]";
  }
  for (const auto& [k, v] : metrics) line += " " + k + " " + format_value(k, v);
  if (tty_) {
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
    status_open_ = true;
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
  auto j = to_json(metrics);
  for (const auto& [k, values] : lists) j[k] = values;
  j["step"] = step;
  write_line(j);
  if (tensorboard_) {
    for (const auto& [k, v] : metrics) tensorboard_->scalar("train/" + k, v, step);
    tensorboard_->flush();
  }
}

void Progress::write_line(nlohmann::json& j) {
  if (!log_.is_open()) return;
  if (!options_.run.empty()) j["run"] = options_.run;
  log_ << j.dump() << '\n';
  log_.flush();
}

void Progress::event(const std::string& kind, int64_t step, const std::vector<std::pair<std::string, double>>& metrics,
                     const std::string& text) {
  if (!options_.enabled) return;
  end_status_line();
  std::string line = kind + " at step " + std::to_string(step) + ":";
  for (const auto& [k, v] : metrics) line += " " + k + " " + format_value(k, v);
  if (!text.empty()) line += " " + text;
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
  auto j = to_json(metrics);
  j["event"] = kind;
  j["step"] = step;
  if (!text.empty()) j["text"] = text;
  write_line(j);
  if (tensorboard_ && !metrics.empty()) {
    for (const auto& [k, v] : metrics) tensorboard_->scalar(kind + "/" + k, v, step);
    tensorboard_->flush();
  }
}

namespace {
// A "Field:   N kB" line of a /proc file, in GiB (0 when absent).
double proc_field_gib(const char* file, const char* field) {
  std::ifstream in(file);
  std::string line;
  const size_t len = std::strlen(field);
  while (std::getline(in, line))
    if (line.compare(0, len, field) == 0) return std::stod(line.substr(len)) / (1 << 20);
  return 0;
}
}  // namespace

double resident_gib() { return proc_field_gib("/proc/self/status", "VmRSS:"); }
double peak_resident_gib() { return proc_field_gib("/proc/self/status", "VmHWM:"); }

double available_memory_gib() { return proc_field_gib("/proc/meminfo", "MemAvailable:"); }

bool reset_peak_resident() {
  malloc_trim(0);  // freed heap goes back first, or the new peak starts from memory no one uses
  std::ofstream out("/proc/self/clear_refs");
  out << "5";  // resets VmHWM to the current resident size (Linux 4.0+)
  out.close();
  return static_cast<bool>(out);
}

double measure_matmul_gflops(c10::ScalarType dtype) {
  torch::NoGradGuard no_grad;
  auto a = torch::randn({2048, 2048}).to(dtype), b = torch::randn({2048, 2048}).to(dtype);
  auto c = torch::empty({2048, 2048}, a.options());
  double best = 1e30;
  for (int i = 0; i < 4; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    torch::mm_out(c, a, b);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * 2048 * 2048 * 2048 / best / 1e9;
}

}  // namespace colossal
