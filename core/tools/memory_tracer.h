#pragma once
// Memory over a training step, by phase and by module: where the peak comes from (model data,
// activations kept for backward, temporaries) and which module holds what.
//
//   tools::MemoryTracer tracer;             // installs the host meter; one tracer at a time
//   tracer.begin_step();
//   tracer.phase("forward");  loss = model->loss(...);
//   tracer.phase("backward"); loss.backward();
//   tracer.phase("optimizer"); optimizer.step();
//   tracer.end_step(model_data_bytes);      // parameters + gradients + optimizer state
//   std::cout << tracer.format();           // or tracer.to_json()
//
// Models mark their modules with MemoryTracer::Scope (free when no tracer is active):
//
//   tools::MemoryTracer::Scope scope("layers.3");
//
// A module's "peak" is the most it added above what was held when it was entered (its temporaries
// included); its "kept" is what it still held when it returned (its output and the activations
// autograd saved for backward). Phases report the same two figures over the whole phase.
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/tools/memory_meter.h"

namespace colossal::tools {

class MemoryTracer {
 public:
  struct Options {
    bool device = false;  // read the CUDA device's allocator instead of the host's
  };
  struct Figures {
    int64_t calls = 0;
    int64_t peak = 0;  // most above the entry total (max over calls)
    int64_t kept = 0;  // held at exit above the entry total (max over calls)
  };
  struct StepSummary {
    int64_t start = 0;          // held when the step began
    int64_t peak = 0;           // the step's peak
    int64_t model_data = 0;     // as given to end_step
    int64_t activations = 0;    // what the forward phase kept
    int64_t temporary = 0;      // peak - start - activations (never negative)
  };

  MemoryTracer() : MemoryTracer(Options{}) {}
  explicit MemoryTracer(Options options);
  ~MemoryTracer();
  MemoryTracer(const MemoryTracer&) = delete;
  MemoryTracer& operator=(const MemoryTracer&) = delete;

  void begin_step();
  /// Ends the previous phase (if any) and starts `name`.
  void phase(const std::string& name);
  void end_step(int64_t model_data_bytes);

  const std::vector<std::pair<std::string, Figures>>& phases() const { return phase_figures_; }
  /// Modules in the order first entered, with their nesting depth.
  struct ModuleRow {
    std::string name;
    int depth = 0;
    Figures figures;
  };
  std::vector<ModuleRow> modules() const;
  const StepSummary& last_step() const { return summary_; }

  std::string format() const;
  nlohmann::json to_json() const;

  /// Marks a module's forward (or any region) for the active tracer, if there is one.
  class Scope {
   public:
    explicit Scope(const char* name);
    explicit Scope(const std::string& name) : Scope(name.c_str()) {}
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    MemoryTracer* tracer_;
  };

  /// The tracer Scope reports to (the most recently constructed live one), or null.
  static MemoryTracer* active();

 private:
  struct Open {
    std::string name;
    int64_t entry = 0;
    int64_t outer_peak = 0;  // the enclosing window's peak, restored on exit
  };
  MemoryReading read() const;
  void reset_peak();
  void raise_peak(int64_t bytes);
  void enter(const char* name);
  void leave();
  void close_phase();

  Options options_;
  MemoryTracer* previous_ = nullptr;
  std::vector<Open> stack_;  // open scopes
  std::map<std::string, size_t> module_index_;
  std::vector<ModuleRow> modules_;
  std::vector<std::pair<std::string, Figures>> phase_figures_;
  std::string phase_;
  int64_t phase_entry_ = 0;
  int64_t step_start_ = 0;
  int64_t step_peak_ = 0;
  int64_t forward_kept_ = 0;
  StepSummary summary_;
};

}  // namespace colossal::tools
