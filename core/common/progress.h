#pragma once
// Training progress for people and for programs:
//   * a status line on standard error (redrawn in place on a terminal, one line per update
//     otherwise so logs stay readable): "step 120/300 [=====>    ] loss 3.412 lr 2.1e-03 ..."
//   * JSON lines of the same metrics appended to a log file (--log_file), one object per update;
//   * the same scalars in TensorBoard event files (--tensorboard DIR): "train/<metric>" for an
//     update, "<event>/<metric>" for an event ("eval/loss").
// Only the process that constructs it with enabled = true writes (rank 0 by convention).
#include <c10/core/ScalarType.h>
#include <nlohmann/json_fwd.hpp>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace colossal {

class TensorBoardWriter;

class Progress {
 public:
  struct Options {
    bool enabled = true;
    std::string log_file;  // JSON lines; empty: none
    int64_t total_steps = 0;
    std::string tensorboard_dir;  // event files; empty: none
    std::string run;              // added to every JSON line as "run" (runs sharing a log file)
  };
  explicit Progress(Options options);
  ~Progress();

  /// One training update: `metrics` in display order (name, value). Also written to the log,
  /// with `lists` (name, values: e.g. tokens per expert), which only the log holds.
  void step(int64_t step, const std::vector<std::pair<std::string, double>>& metrics,
            const std::vector<std::pair<std::string, std::vector<double>>>& lists = {});
  /// Anything else worth a permanent line (evaluation, checkpoint saved): printed on its own
  /// line and logged as {"event": kind, ...metrics}.
  void event(const std::string& kind, int64_t step, const std::vector<std::pair<std::string, double>>& metrics,
             const std::string& text = "");

 private:
  void end_status_line();
  void write_line(nlohmann::json& j);
  Options options_;
  std::ofstream log_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
  bool tty_ = false;
  bool status_open_ = false;
};

/// Resident and peak resident memory of this process, GiB (Linux /proc/self/status).
double resident_gib();
double peak_resident_gib();
/// Memory the kernel says new allocations can get without swapping (MemAvailable), GiB; 0 when
/// unknown.
double available_memory_gib();
/// Starts a new peak from the current resident size (freed heap returned to the system first),
/// so peak_resident_gib() measures what runs after. False where the kernel does not allow it.
bool reset_peak_resident();

/// Matrix-product rate of this process's threads in `dtype` (2048 x 2048, best of a few),
/// GFLOP/s: the denominator of model FLOPs utilisation (bf16 training divides by the bf16 rate).
double measure_matmul_gflops(c10::ScalarType dtype = c10::kFloat);

}  // namespace colossal
