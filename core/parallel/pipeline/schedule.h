#pragma once
// Pipeline schedules: for every pipeline rank, the order in which it runs forward, backward and
// (for the zero-bubble schedules) deferred weight-gradient steps over the microbatches and its
// model chunks. A schedule is data; the runtime (pipeline/runner.h) executes a rank's steps in
// order — receiving what a step needs just before it, sending what it produces right after —
// and simulate() replays every rank's steps against the dependencies to check them and to
// predict each rank's idle time.
//
//   gpipe        all forwards, then all backwards                       bubble (p-1)/(m+p-1)
//   1f1b         p-r-1 warm-up forwards on rank r, then one forward and  bubble (p-1)/(m+p-1),
//                one backward in turn (at most p-r microbatches live)    memory p microbatches
//   interleaved  v chunks per rank, virtual stage c*p + r (Megatron's     bubble (p-1)/(v*m+p-1)
//                order; m a multiple of p)
//   zbh1         1f1b with the backward split: B (the input gradient,    bubble about a third of
//                sent upstream at once) and W (the weight gradient,     1f1b's, same peak memory
//                deferred into what would be bubbles); every rank may   (p microbatches)
//                hold p microbatches (1f1b's peak, on its first stage)
//   zbv          two chunks per rank in a V (rank r holds virtual stages  near zero with enough
//                r and 2p-1-r, so rank 0 holds the embedding and the     microbatches
//                loss), backward split as zbh1
//
// The 1f1b, zbh1 and zbv orders come from one list scheduler: in simulated time with unit costs
// (F = B = W = 1, an unsplit backward 2) or each rank's measured ones (ScheduleOptions::costs),
// each rank, when free, runs a ready backward first, else a forward while its live microbatches
// are under the schedule's bound, else a deferred W. With measured costs the deferred W land
// where this work's bubbles are, as the zero-bubble paper's scheduler places them from profiled
// times (the runner re-plans zbh1 and zbv so after its third step).
// Costs are per chunk step: with v chunks a step is 1/v of a stage's work, so compare schedules
// of different chunk counts by their bubble ratio (idle / busy), not their makespan.
#include <cstdint>
#include <string>
#include <vector>

namespace colossal::parallel::pipeline {

enum class Work : uint8_t {
  kForward,         // F
  kBackward,        // B and W together (the unsplit schedules)
  kBackwardInput,   // B: the gradient of the chunk's input, sent upstream at once
  kBackwardWeight,  // W: the weight gradients of a microbatch whose B ran
};
const char* to_string(Work work);

struct Step {
  Work work = Work::kForward;
  int microbatch = 0;
  int chunk = 0;  // which of the rank's model chunks
  bool operator==(const Step&) const = default;
};
std::string to_string(const Step& step);

enum class ScheduleKind { kGPipe, k1F1B, kInterleaved, kZBH1, kZBV };
/// gpipe | 1f1b | interleaved | zbh1 | zbv; anything else is an error listing them.
ScheduleKind parse_schedule(const std::string& name);
std::string to_string(ScheduleKind kind);

/// What one step of a rank costs, for the list scheduler and simulate(). An unsplit backward
/// costs backward_input + backward_weight.
struct StepCosts {
  double forward = 1, backward_input = 1, backward_weight = 1;
};
/// Which StepCosts field a step of `work` is timed into: 0 forward, 1 backward (B, or an unsplit
/// backward), 2 weight gradient (W).
inline int cost_index(Work work) { return work == Work::kForward ? 0 : work == Work::kBackwardWeight ? 2 : 1; }

struct ScheduleOptions {
  std::string kind = "1f1b";
  int stages = 1;        // pipeline ranks (pp)
  int microbatches = 1;  // per step
  int chunks = 1;        // model chunks per rank: interleaved >= 2, zbv 2, the others 1
  // Each rank's step costs for the list scheduler (1f1b, zbh1, zbv); empty: unit costs.
  std::vector<StepCosts> costs;
  /// Throws naming what does not fit (microbatches fewer than stages for 1f1b, chunks for
  /// the kind, interleaved microbatches not a multiple of the stages).
  void validate() const;
};

/// Where model chunk `chunk` of pipeline rank `rank` sits in the model (0: holds the embedding;
/// stages*chunks-1: the loss): c*p + r, or for zbv's V r and 2p-1-r.
int virtual_stage_of(const ScheduleOptions& options, int rank, int chunk);

class Schedule {
 public:
  explicit Schedule(ScheduleOptions options);
  /// A hand-written order (checked only by simulate()).
  Schedule(ScheduleOptions options, std::vector<std::vector<Step>> steps);

  const ScheduleOptions& options() const { return options_; }
  ScheduleKind kind() const { return kind_; }
  int stages() const { return options_.stages; }
  int microbatches() const { return options_.microbatches; }
  int chunks() const { return options_.chunks; }
  int virtual_stages() const { return options_.stages * options_.chunks; }
  /// Whether backward runs as B then W (zbh1, zbv).
  bool splits_backward() const { return kind_ == ScheduleKind::kZBH1 || kind_ == ScheduleKind::kZBV; }

  /// The position in the model (0: holds the embedding; virtual_stages()-1: the loss) of
  /// `chunk` on `rank`, and back.
  int virtual_stage(int rank, int chunk) const;
  int rank_of(int virtual_stage) const;
  int chunk_of(int virtual_stage) const;

  /// Rank `rank`'s steps, in the order it runs them.
  const std::vector<Step>& steps(int rank) const { return steps_.at(rank); }
  /// The idle share of a step the textbook formula gives (F = B = W = 1).
  double theoretical_bubble() const;

 private:
  void build_gpipe();
  void build_interleaved();
  void build_greedy();

  ScheduleOptions options_;
  ScheduleKind kind_;
  std::vector<std::vector<Step>> steps_;
};

struct Simulation {
  double makespan = 0;
  std::vector<double> busy;           // per rank
  std::vector<double> idle_fraction;  // per rank: 1 - busy / makespan
  std::vector<int> peak_live;         // per rank: most microbatch-chunks whose F ran and whose
                                      // last backward step (W, or the unsplit B) had not
  double mean_idle() const;
};

/// Runs every rank's steps in order against the dependencies — F after the previous virtual
/// stage's F; B after its own F and the next virtual stage's B; W after its B — and returns the
/// timeline's figures. Throws naming the rank and step when a step is missing, repeated, out of
/// range, or can never run (the ranks would wait on each other for ever).
Simulation simulate(const Schedule& schedule, const StepCosts& costs = {});
/// The same with each rank's own step costs (measured stages that are not equal).
Simulation simulate(const Schedule& schedule, const std::vector<StepCosts>& rank_costs);

}  // namespace colossal::parallel::pipeline
