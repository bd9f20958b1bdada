#include "core/booster/verify_report.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "core/checkpoint/safetensors.h"
#include "core/common/check.h"
#include "core/common/fs.h"

namespace colossal::booster {
namespace {

std::string format(double v, int digits = 3) {
  char s[40];
  std::snprintf(s, sizeof s, "%.*g", digits, v);
  return s;
}

// step number -> file, for every step-K.safetensors in `dir`.
std::map<int64_t, std::string> recorded_steps(const std::string& dir) {
  COLOSSAL_CHECK(fs::is_directory(dir), "no recording at '", dir, "' (the run stopped before its first step?)");
  std::map<int64_t, std::string> out;
  for (const auto& name : fs::list_dir(dir)) {
    const std::string prefix = "step-", suffix = ".safetensors";
    if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    const auto digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
    if (digits.empty() || !std::all_of(digits.begin(), digits.end(), ::isdigit)) continue;
    out[std::stoll(digits)] = dir + "/" + name;
  }
  COLOSSAL_CHECK(!out.empty(), "'", dir, "' holds no recorded step (step-K.safetensors)");
  return out;
}

// max|got - want| over `scale`: the larger of the two tensors' largest magnitudes, but at least
// `floor` (what the kind of tensor is measured against across the model).
TensorDifference difference(const std::string& name, const at::Tensor& got, const at::Tensor& want, double floor) {
  TensorDifference d{name};
  if (got.numel() == 0) return d;
  d.max_abs_diff = (got - want).abs().max().item<double>();
  const double scale = std::max({got.abs().max().item<double>(), want.abs().max().item<double>(), floor});
  d.relative = scale > 0 ? d.max_abs_diff / scale : 0.0;
  if (std::isnan(d.max_abs_diff)) d.relative = d.max_abs_diff;  // NaN on one side: never within tolerance
  return d;
}

// The largest |value| over one kind ("grad/" or "param/") of a recording's tensors.
double largest(const checkpoint::SafetensorsFile& f, const std::string& prefix) {
  double m = 0;
  for (const auto& info : f.tensors())
    if (info.name.rfind(prefix, 0) == 0) {
      const auto t = f.view(info.name);
      if (t.numel() > 0) m = std::max(m, t.abs().max().to(torch::kFloat64).item<double>());
    }
  return m;
}

std::string meta(const checkpoint::SafetensorsFile& f, const std::string& key) {
  auto it = f.metadata().find(key);
  COLOSSAL_CHECK(it != f.metadata().end(), "'", f.path(), "': metadata field '", key,
                 "' is missing (not written by a recording run)");
  return it->second;
}

}  // namespace

VerifyTolerances VerifyTolerances::resolved(const std::string& precision) const {
  // fp32: a layout sums in another order (microbatches, tp slices, sp chunks): ~1e-7 per
  // operation, grown through a few layers and steps; bf16 keeps 8 bits of mantissa.
  const bool low = precision == "bf16" || precision == "fp16";
  VerifyTolerances t = *this;
  if (t.loss < 0) t.loss = low ? 2e-2 : 1e-5;
  if (t.gradient < 0) t.gradient = low ? 5e-2 : 1e-4;
  // Parameters after an AdamW step: Adam divides by sqrt(v), so an element whose gradient is
  // near zero turns a summation-order difference into an update difference of up to ~lr
  // (a few 1e-6 of the largest weight after 2 steps of the default runs, on tp, sp, pp, ZeRO and
  // Gemini layouts; it grows with the steps).
  if (t.parameter < 0) t.parameter = low ? 2e-2 : 1e-4;
  return t;
}

VerifyReport compare_recordings(const std::string& layout_dir, const std::string& reference_dir,
                                const VerifyTolerances& tolerances) {
  const auto layout_steps = recorded_steps(layout_dir), reference_steps = recorded_steps(reference_dir);
  VerifyReport report;
  for (const auto& [step, path] : reference_steps)
    if (!layout_steps.count(step))
      report.problems.push_back("step " + std::to_string(step) + ": recorded by one process, not by the layout");
  bool first = true;
  double lr_sum = 0;                              // the learning rates of the steps so far
  std::map<std::string, at::Tensor> indecisive;  // parameter -> elements whose gradient was near zero
  for (const auto& [step, path] : layout_steps) {
    auto it = reference_steps.find(step);
    if (it == reference_steps.end()) {
      report.problems.push_back("step " + std::to_string(step) + ": recorded by the layout, not by one process");
      continue;
    }
    auto got = checkpoint::SafetensorsFile::open(path);
    auto want = checkpoint::SafetensorsFile::open(it->second);
    if (first) {
      report.layout = meta(*got, "layout") + ", " + meta(*got, "world_size") + " rank(s)";
      report.reference = meta(*want, "layout") + ", " + meta(*want, "world_size") + " rank(s)";
      report.precision = meta(*got, "precision");
      report.tolerances = tolerances.resolved(report.precision);
      first = false;
    }
    const auto& tol = report.tolerances;
    StepComparison c;
    c.step = step;
    // Step 0 holds the starting weights only (no loss, no gradient): both runs must begin alike.
    c.has_loss = meta(*want, "loss") != "none" && meta(*got, "loss") != "none";
    if (c.has_loss) {
      c.layout_loss = std::stod(meta(*got, "loss"));
      c.reference_loss = std::stod(meta(*want, "loss"));
      c.loss_relative = std::abs(c.layout_loss - c.reference_loss) / std::max(std::abs(c.reference_loss), 1e-30);
      if (!(c.loss_relative <= tol.loss) && !(std::abs(c.layout_loss - c.reference_loss) <= tol.loss_abs))
        report.problems.push_back("step " + std::to_string(step) + ": loss " + format(c.layout_loss) + " against " +
                                  format(c.reference_loss) + " (relative " + format(c.loss_relative) + " > " +
                                  format(tol.loss) + ")");
    }
    // What each kind is measured against across the model. Gradients: each tensor against its own
    // largest value, but at least 1e-2 of the model's largest gradient, so the check's absolute
    // limit never falls below about 1e-6 of that (1e-4 x 1e-2): under it lies the rounding noise of
    // a sum with cancellation (a gradient that is zero in exact arithmetic, such as a bias ahead of
    // a normalisation or an attention key bias, comes out at ~1e-8 of the largest, differently for
    // every batch split). A gradient scaled by a broken reduction still shows wherever it is above
    // ~1e-6 of the largest. Parameters: against the model's largest weight, since an optimizer
    // step moves every weight by about lr whatever its size.
    const double largest_gradient = largest(*want, "grad/");
    const double gradient_floor = 1e-2 * largest_gradient;
    const double decisive_floor = 1e-4 * largest_gradient;  // a clearly non-zero gradient
    const double parameter_floor = largest(*want, "param/");
    // Adam divides by sqrt(v): an element whose gradient is near zero (at or under 1e-3 of its
    // tensor's largest or 1e-6 of the model's, at this step or an earlier one) moves by up to ~lr
    // per step in either run
    // whatever its gradient's rounding, so it is held to 2 x the learning rates so far instead.
    const auto lr_meta = want->metadata().find("lr");
    if (lr_meta != want->metadata().end()) lr_sum += std::stod(lr_meta->second);
    for (const auto& info : want->tensors()) {
      if (info.name.rfind("grad/", 0) != 0) continue;
      const auto g = want->view(info.name).to(torch::kFloat64).abs();
      if (g.numel() == 0) continue;
      const auto weak = g <= std::max(1e-3 * g.max().item<double>(), 1e-6 * largest_gradient);
      auto& mask = indecisive[info.name.substr(5)];
      mask = mask.defined() && mask.sizes() == weak.sizes() ? mask.logical_or(weak) : weak;
    }
    std::vector<double> gradient_scales;  // each clearly non-zero gradient's factor against one process
    for (const auto& info : want->tensors()) {
      const bool is_grad = info.name.rfind("grad/", 0) == 0;
      const std::string kind = is_grad ? "gradient" : "parameter";
      const std::string name = info.name.substr(info.name.find('/') + 1);
      if (!got->find(info.name)) {
        // A layout that keeps a gradient off memory (NVMe) does not record it: noted, not failed.
        (is_grad ? report.notes : report.problems)
            .push_back("step " + std::to_string(step) + ": " + kind + " of '" + name + "' not recorded by the layout");
        continue;
      }
      auto a = got->view(info.name).to(torch::kFloat64), b = want->view(info.name).to(torch::kFloat64);
      if (a.sizes() != b.sizes()) {
        std::ostringstream s;
        s << "step " << step << ": " << kind << " of '" << name << "' has shape " << a.sizes() << " against "
          << b.sizes();
        report.problems.push_back(s.str());
        continue;
      }
      if (!is_grad && lr_sum > 0) {
        const auto it = indecisive.find(name);
        if (it != indecisive.end() && it->second.sizes() == a.sizes() && it->second.any().item<bool>()) {
          const auto& weak = it->second;
          const double moved = (a - b).abs().masked_select(weak).max().item<double>();
          if (!(moved <= 2 * lr_sum))
            report.problems.push_back("step " + std::to_string(step) + ": parameter of '" + name +
                                      "' moved by " + format(moved) + " where its gradient is near zero (more than "
                                      "2 x the learning rates so far, " + format(2 * lr_sum) + ")");
          // The rest against the usual limit: the near-zero elements taken as equal.
          a = torch::where(weak, b, a);
        }
      }
      auto d = difference(name, a, b, is_grad ? gradient_floor : parameter_floor);
      if (is_grad && b.numel() > 0 && b.abs().max().item<double>() >= decisive_floor) {
        const double bb = b.square().sum().item<double>();
        if (bb > 0) gradient_scales.push_back((a * b).sum().item<double>() / bb);
      }
      auto& worst = is_grad ? c.gradient : c.parameter;
      (is_grad ? c.gradients : c.parameters) += 1;
      if (d.relative > worst.relative || worst.name.empty()) worst = d;
      const double limit = is_grad ? tol.gradient : tol.parameter;
      if (!(d.relative <= limit))
        report.problems.push_back("step " + std::to_string(step) + ": " + kind + " of '" + name + "' differs by " +
                                  format(d.max_abs_diff) + " (relative " + format(d.relative) + " > " +
                                  format(limit) + ")");
    }
    for (const auto& info : got->tensors())
      if (!want->find(info.name))
        report.problems.push_back("step " + std::to_string(step) + ": '" + info.name +
                                  "' recorded by the layout, not by one process");
    // One factor for every gradient is a reduction's divisor (an average where a sum belongs, or
    // the reverse) or a loss scale left in, not an arithmetic error spread through the model.
    if (gradient_scales.size() >= 2) {
      const auto [lo, hi] = std::minmax_element(gradient_scales.begin(), gradient_scales.end());
      const double mid = (*lo + *hi) / 2;
      if (*hi - *lo <= 1e-3 * std::abs(mid) && std::abs(mid - 1) > tol.gradient)
        report.hints.push_back("step " + std::to_string(step) + ": every gradient is " + format(mid) +
                               " x one process's: a reduction that averages where it should sum (or the "
                               "reverse), or a loss scale left in");
    }
    report.steps.push_back(c);
  }
  return report;
}

std::string VerifyReport::text() const {
  std::ostringstream s;
  s << "layout:      " << layout << "\n";
  s << "reference:   " << reference << "\n";
  s << "tolerances:  loss " << format(tolerances.loss) << ", gradients " << format(tolerances.gradient)
    << ", parameters " << format(tolerances.parameter) << " (relative; " << precision << ")";
  if (tolerances.loss_abs > 0) s << "; loss within " << format(tolerances.loss_abs) << " absolute";
  s << "\n\n";
  char line[512];
  std::snprintf(line, sizeof line, "%-5s %-14s %-14s %-9s %-9s %-9s %s\n", "step", "loss (layout)",
                "loss (1 proc)", "loss rel", "grad rel", "param rel", "worst gradient / worst parameter");
  s << line;
  for (const auto& c : steps) {
    auto number = [&](double v) { return c.has_loss ? format(v) : std::string("-"); };
    std::snprintf(line, sizeof line, "%-5ld %-14s %-14s %-9s %-9s %-9s %s / %s\n", static_cast<long>(c.step),
                  c.has_loss ? format(c.layout_loss, 8).c_str() : "(start)",
                  c.has_loss ? format(c.reference_loss, 8).c_str() : "(start)", number(c.loss_relative).c_str(),
                  c.gradients ? format(c.gradient.relative).c_str() : "-", format(c.parameter.relative).c_str(),
                  c.gradient.name.empty() ? "-" : c.gradient.name.c_str(),
                  c.parameter.name.empty() ? "-" : c.parameter.name.c_str());
    s << line;
  }
  if (!steps.empty())
    s << "(" << steps.back().gradients << " gradients and " << steps.back().parameters
      << " parameters compared per step)\n";
  for (const auto& n : notes) s << "note: " << n << "\n";
  for (const auto& h : hints) s << "hint: " << h << "\n";
  if (passed()) {
    s << "\nPASS: the layout matches one process within the tolerances\n";
  } else {
    s << "\nFAIL: " << problems.size() << " difference(s) beyond tolerance or missing:\n";
    const size_t shown = std::min<size_t>(problems.size(), 20);
    for (size_t i = 0; i < shown; ++i) s << "  " << problems[i] << "\n";
    if (problems.size() > shown) s << "  ... and " << problems.size() - shown << " more\n";
  }
  return s.str();
}

}  // namespace colossal::booster
