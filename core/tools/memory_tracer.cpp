#include "core/tools/memory_tracer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cstdio>

#include "core/common/check.h"

namespace colossal::tools {
namespace {

std::atomic<MemoryTracer*> g_active{nullptr};

std::string mib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

void merge(MemoryTracer::Figures& f, int64_t peak, int64_t kept) {
  f.calls += 1;
  f.peak = std::max(f.peak, peak);
  f.kept = std::max(f.kept, kept);
}

}  // namespace

MemoryTracer::MemoryTracer(Options options) : options_(options) {
  if (options_.device) {
    COLOSSAL_CHECK(device_memory::available(), "[memory tracer] device memory asked for, but no CUDA device is visible");
  } else {
    host_memory::install();
  }
  previous_ = g_active.exchange(this);
}

MemoryTracer::~MemoryTracer() { g_active.store(previous_); }

MemoryTracer* MemoryTracer::active() { return g_active.load(std::memory_order_relaxed); }

MemoryReading MemoryTracer::read() const { return options_.device ? device_memory::read() : host_memory::read(); }

void MemoryTracer::reset_peak() { options_.device ? device_memory::reset_peak() : host_memory::reset_peak(); }

// The device allocator's peak cannot be raised by hand: after a nested window the enclosing one
// keeps the larger of the two through step_peak_ and the scopes' own records instead.
void MemoryTracer::raise_peak(int64_t bytes) {
  if (!options_.device) host_memory::raise_peak(bytes);
}

void MemoryTracer::begin_step() {
  stack_.clear();
  phase_figures_.clear();
  phase_.clear();
  forward_kept_ = 0;
  reset_peak();
  step_start_ = read().current;
  step_peak_ = step_start_;
}

void MemoryTracer::close_phase() {
  if (phase_.empty()) return;
  const auto now = read();
  step_peak_ = std::max(step_peak_, now.peak);
  Figures f;
  f.calls = 1;
  f.peak = now.peak - phase_entry_;
  f.kept = now.current - phase_entry_;
  if (phase_ == "forward") forward_kept_ = f.kept;
  phase_figures_.emplace_back(phase_, f);
  phase_.clear();
}

void MemoryTracer::phase(const std::string& name) {
  close_phase();
  phase_ = name;
  step_peak_ = std::max(step_peak_, read().peak);
  reset_peak();
  phase_entry_ = read().current;
}

void MemoryTracer::end_step(int64_t model_data_bytes) {
  close_phase();
  step_peak_ = std::max(step_peak_, read().peak);
  summary_.start = step_start_;
  summary_.peak = step_peak_;
  summary_.model_data = model_data_bytes;
  summary_.activations = std::max<int64_t>(forward_kept_, 0);
  summary_.temporary = std::max<int64_t>(step_peak_ - step_start_ - summary_.activations, 0);
}

void MemoryTracer::enter(const char* name) {
  Open o;
  // Recomputation under activation checkpointing runs a module again in backward: its own row.
  o.name = phase_.empty() || phase_ == "forward" ? std::string(name) : std::string(name) + " (" + phase_ + ")";
  o.outer_peak = read().peak;
  reset_peak();
  o.entry = read().current;
  stack_.push_back(std::move(o));
}

void MemoryTracer::leave() {
  if (stack_.empty()) return;
  Open o = std::move(stack_.back());
  stack_.pop_back();
  const auto now = read();
  auto [it, added] = module_index_.emplace(o.name, modules_.size());
  if (added) modules_.push_back({o.name, static_cast<int>(stack_.size()), {}});
  merge(modules_[it->second].figures, now.peak - o.entry, now.current - o.entry);
  raise_peak(std::max(o.outer_peak, now.peak));
}

std::vector<MemoryTracer::ModuleRow> MemoryTracer::modules() const { return modules_; }

MemoryTracer::Scope::Scope(const char* name) : tracer_(MemoryTracer::active()) {
  if (tracer_) tracer_->enter(name);
}

MemoryTracer::Scope::~Scope() {
  if (tracer_) tracer_->leave();
}

std::string MemoryTracer::format() const {
  std::string out;
  char line[256];
  const auto& s = summary_;
  std::snprintf(line, sizeof line,
                "memory (%s, MiB): step peak %s = at start %s (model data %s) + activations %s + temporary %s\n",
                options_.device ? "device" : "host", mib(s.peak).c_str(), mib(s.start).c_str(),
                mib(s.model_data).c_str(), mib(s.activations).c_str(), mib(s.temporary).c_str());
  out += line;
  std::snprintf(line, sizeof line, "  %-36s %7s %12s %12s\n", "phase / module", "calls", "peak MiB", "kept MiB");
  out += line;
  for (const auto& [name, f] : phase_figures_) {
    std::snprintf(line, sizeof line, "  %-36s %7lld %12s %12s\n", name.c_str(), static_cast<long long>(f.calls),
                  mib(f.peak).c_str(), mib(f.kept).c_str());
    out += line;
  }
  for (const auto& row : modules_) {
    std::string label = std::string(2 * (row.depth + 1), ' ') + row.name;
    std::snprintf(line, sizeof line, "  %-36s %7lld %12s %12s\n", label.c_str(), static_cast<long long>(row.figures.calls),
                  mib(row.figures.peak).c_str(), mib(row.figures.kept).c_str());
    out += line;
  }
  return out;
}

nlohmann::json MemoryTracer::to_json() const {
  auto figures = [](const Figures& f) { return nlohmann::json{{"calls", f.calls}, {"peak_bytes", f.peak}, {"kept_bytes", f.kept}}; };
  nlohmann::json phases = nlohmann::json::array();
  for (const auto& [name, f] : phase_figures_) {
    auto j = figures(f);
    j["phase"] = name;
    phases.push_back(j);
  }
  nlohmann::json modules = nlohmann::json::array();
  for (const auto& row : modules_) {
    auto j = figures(row.figures);
    j["module"] = row.name;
    j["depth"] = row.depth;
    modules.push_back(j);
  }
  const auto& s = summary_;
  return {{"memory", options_.device ? "device" : "host"},
          {"totals", {{"start_bytes", s.start}, {"peak_bytes", s.peak}, {"model_data_bytes", s.model_data},
                    {"activation_bytes", s.activations}, {"temporary_bytes", s.temporary}}},
          {"phases", phases},
          {"modules", modules}};
}

}  // namespace colossal::tools
