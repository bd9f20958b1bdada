#include "core/parallel/pipeline/schedule.h"

#include <algorithm>
#include <limits>
#include <set>

#include "core/common/check.h"

namespace colossal::parallel::pipeline {

const char* to_string(Work work) {
  switch (work) {
    case Work::kForward: return "F";
    case Work::kBackward: return "B";
    case Work::kBackwardInput: return "Bi";
    case Work::kBackwardWeight: return "W";
  }
  return "?";
}

std::string to_string(const Step& s) {
  return std::string(to_string(s.work)) + "(mb " + std::to_string(s.microbatch) + ", chunk " +
         std::to_string(s.chunk) + ")";
}

ScheduleKind parse_schedule(const std::string& name) {
  if (name == "gpipe") return ScheduleKind::kGPipe;
  if (name == "1f1b") return ScheduleKind::k1F1B;
  if (name == "interleaved") return ScheduleKind::kInterleaved;
  if (name == "zbh1") return ScheduleKind::kZBH1;
  if (name == "zbv") return ScheduleKind::kZBV;
  COLOSSAL_FAIL("[pipeline] schedule '", name, "': expected gpipe, 1f1b, interleaved, zbh1 or zbv");
}

std::string to_string(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kGPipe: return "gpipe";
    case ScheduleKind::k1F1B: return "1f1b";
    case ScheduleKind::kInterleaved: return "interleaved";
    case ScheduleKind::kZBH1: return "zbh1";
    case ScheduleKind::kZBV: return "zbv";
  }
  return "?";
}

void ScheduleOptions::validate() const {
  const auto k = parse_schedule(kind);
  COLOSSAL_CHECK(stages >= 1, "[pipeline] stages: expected >= 1, got ", stages);
  COLOSSAL_CHECK(microbatches >= 1, "[pipeline] num_microbatches: expected >= 1, got ", microbatches);
  switch (k) {
    case ScheduleKind::kInterleaved:
      COLOSSAL_CHECK(chunks >= 2, "[pipeline] interleaved needs num_model_chunks >= 2 (got ", chunks,
                     "); with one chunk per rank use 1f1b");
      COLOSSAL_CHECK(microbatches % stages == 0, "[pipeline] interleaved needs num_microbatches (", microbatches,
                     ") to be a multiple of pp (", stages, ")");
      break;
    case ScheduleKind::kZBV:
      COLOSSAL_CHECK(chunks == 2, "[pipeline] zbv runs exactly 2 model chunks per rank (a V), got num_model_chunks ",
                     chunks);
      break;
    default:
      COLOSSAL_CHECK(chunks == 1, "[pipeline] ", kind, " runs one model chunk per rank, got num_model_chunks ", chunks,
                     " (interleaved and zbv take more)");
  }
  COLOSSAL_CHECK(costs.empty() || static_cast<int>(costs.size()) == stages, "[pipeline] step costs for ",
                 costs.size(), " ranks, expected one per stage (", stages, ")");
  for (const auto& c : costs)
    COLOSSAL_CHECK(c.forward > 0 && c.backward_input > 0 && c.backward_weight > 0,
                   "[pipeline] step costs must be positive, got F ", c.forward, " B ", c.backward_input, " W ",
                   c.backward_weight);
  if (k != ScheduleKind::kGPipe)
    COLOSSAL_CHECK(microbatches >= stages, "[pipeline] ", kind, " needs at least as many microbatches as stages: ",
                   "num_microbatches ", microbatches, " < pp ", stages, " (the pipeline would never fill)");
}

Schedule::Schedule(ScheduleOptions options) : options_(std::move(options)) {
  options_.validate();
  kind_ = parse_schedule(options_.kind);
  steps_.assign(options_.stages, {});
  switch (kind_) {
    case ScheduleKind::kGPipe: build_gpipe(); break;
    case ScheduleKind::kInterleaved: build_interleaved(); break;
    default: build_greedy();
  }
}

Schedule::Schedule(ScheduleOptions options, std::vector<std::vector<Step>> steps)
    : options_(std::move(options)), steps_(std::move(steps)) {
  options_.validate();
  kind_ = parse_schedule(options_.kind);
  COLOSSAL_CHECK(static_cast<int>(steps_.size()) == options_.stages, "[pipeline] a schedule for ", options_.stages,
                 " stages was given steps for ", steps_.size(), " ranks");
}

int virtual_stage_of(const ScheduleOptions& options, int rank, int chunk) {
  const int p = options.stages;
  if (parse_schedule(options.kind) == ScheduleKind::kZBV) return chunk == 0 ? rank : 2 * p - 1 - rank;
  return chunk * p + rank;
}

int Schedule::virtual_stage(int rank, int chunk) const { return virtual_stage_of(options_, rank, chunk); }

int Schedule::rank_of(int v) const {
  const int p = stages();
  if (kind_ == ScheduleKind::kZBV) return v < p ? v : 2 * p - 1 - v;
  return v % p;
}

int Schedule::chunk_of(int v) const {
  const int p = stages();
  if (kind_ == ScheduleKind::kZBV) return v < p ? 0 : 1;
  return v / p;
}

double Schedule::theoretical_bubble() const {
  const double p = stages(), m = microbatches(), v = chunks();
  switch (kind_) {
    case ScheduleKind::kGPipe:
    case ScheduleKind::k1F1B: return (p - 1) / m;
    case ScheduleKind::kInterleaved: return (p - 1) / (v * m);
    case ScheduleKind::kZBH1: return (p - 1) / (3 * m);
    case ScheduleKind::kZBV: return 0.0;
  }
  return 0.0;
}

void Schedule::build_gpipe() {
  for (int r = 0; r < stages(); ++r) {
    for (int mb = 0; mb < microbatches(); ++mb) steps_[r].push_back({Work::kForward, mb, 0});
    for (int mb = 0; mb < microbatches(); ++mb) steps_[r].push_back({Work::kBackward, mb, 0});
  }
}

// Megatron's interleaved order: forwards go through the chunks in groups of p microbatches;
// rank r warms up with 2(p-r-1) + (v-1)p forwards, then alternates, then drains.
void Schedule::build_interleaved() {
  const int p = stages(), v = chunks(), m = microbatches(), total = m * v;
  auto microbatch = [&](int k) { return (k / (p * v)) * p + k % p; };
  auto forward_chunk = [&](int k) { return (k / p) % v; };
  auto backward_chunk = [&](int k) { return v - 1 - (k / p) % v; };
  for (int r = 0; r < p; ++r) {
    const int warmup = m == p ? total : std::min((p - r - 1) * 2 + (v - 1) * p, total);
    auto& out = steps_[r];
    for (int k = 0; k < warmup; ++k) out.push_back({Work::kForward, microbatch(k), forward_chunk(k)});
    for (int i = 0; i < total - warmup; ++i) {
      out.push_back({Work::kForward, microbatch(warmup + i), forward_chunk(warmup + i)});
      out.push_back({Work::kBackward, microbatch(i), backward_chunk(i)});
    }
    for (int i = std::max(0, total - warmup); i < total; ++i)
      out.push_back({Work::kBackward, microbatch(i), backward_chunk(i)});
  }
}

// The list scheduler behind 1f1b, zbh1 and zbv (see the header), in simulated time: at each
// moment some step ends (or at 0), every free rank picks a step whose inputs are complete by
// then. Steps take positive time, so a step started now ends later and the order in which ranks
// pick within one moment does not matter. With unit costs every moment is a whole number.
void Schedule::build_greedy() {
  const int p = stages(), m = microbatches(), v = chunks(), V = virtual_stages();
  const bool split = splits_backward();
  const auto& costs = options_.costs;
  constexpr double kNever = std::numeric_limits<double>::infinity();
  // Completion times by virtual stage and microbatch (kNever: not scheduled yet).
  std::vector<std::vector<double>> f_end(V, std::vector<double>(m, kNever)), b_end = f_end;
  std::vector<double> free_at(p, 0.0);
  std::vector<int> live(p, 0);
  std::vector<std::vector<int>> next_f(p, std::vector<int>(v, 0)), next_b = next_f;
  std::vector<std::vector<std::pair<int, int>>> pending_w(p);  // (microbatch, chunk), oldest first
  const size_t per_rank = static_cast<size_t>(m * v * (split ? 3 : 2));
  // Live microbatch-chunks (forward run, last backward step not): 1f1b lets rank r hold p - r;
  // the zero-bubble schedules let every rank reach 1f1b's peak (p, or 2p half-size chunks in the
  // V), which is what lets later stages defer their W into the bubbles.
  const int bound = kind_ == ScheduleKind::kZBV ? 2 * p : p;
  std::set<double> moments{0.0};  // when steps end: the times a rank may start one
  size_t finished = 0;
  while (finished < static_cast<size_t>(p)) {
    COLOSSAL_CHECK(!moments.empty(), "[pipeline] internal: the ", to_string(kind_), " list scheduler is stuck");
    const double t = *moments.begin();
    moments.erase(moments.begin());
    for (int r = 0; r < p; ++r) {
      if (free_at[r] > t || steps_[r].size() == per_rank) continue;
      const int limit = kind_ == ScheduleKind::k1F1B ? bound - r : bound;
      // A ready backward first (the oldest microbatch; the later virtual stage on a tie), else
      // a forward under the live bound, else a deferred weight gradient.
      int chunk = -1;
      Work work = Work::kForward;
      for (int c = v - 1; c >= 0; --c) {
        const int mb = next_b[r][c], vs = virtual_stage(r, c);
        if (mb >= m || f_end[vs][mb] > t || (vs + 1 < V && b_end[vs + 1][mb] > t)) continue;
        if (chunk < 0 || mb < next_b[r][chunk]) chunk = c;
      }
      if (chunk >= 0) work = split ? Work::kBackwardInput : Work::kBackward;
      if (chunk < 0 && live[r] < limit) {
        for (int c = v - 1; c >= 0; --c) {
          const int mb = next_f[r][c], vs = virtual_stage(r, c);
          if (mb >= m || (vs > 0 && f_end[vs - 1][mb] > t)) continue;
          // With several chunks the last free slot is kept for a later chunk's forward: filled
          // with first-chunk forwards, no backward could ever start (found with measured costs).
          if (v > 1 && c == 0 && live[r] + 1 >= limit) continue;
          if (chunk < 0 || mb < next_f[r][chunk]) chunk = c;
        }
      }
      if (chunk < 0 && !pending_w[r].empty()) {
        work = Work::kBackwardWeight;
        chunk = pending_w[r].front().second;
      }
      if (chunk < 0) continue;  // waits for another rank
      const int vs = virtual_stage(r, chunk);
      const StepCosts unit, &c = costs.empty() ? unit : costs[r];
      int mb = 0;
      double cost = 0;
      switch (work) {
        case Work::kForward:
          mb = next_f[r][chunk]++;
          cost = c.forward;
          f_end[vs][mb] = t + cost;
          ++live[r];
          break;
        case Work::kBackward:
        case Work::kBackwardInput:
          mb = next_b[r][chunk]++;
          cost = split ? c.backward_input : c.backward_input + c.backward_weight;
          b_end[vs][mb] = t + cost;
          if (split) pending_w[r].push_back({mb, chunk});
          else --live[r];
          break;
        case Work::kBackwardWeight:
          mb = pending_w[r].front().first;
          pending_w[r].erase(pending_w[r].begin());
          cost = c.backward_weight;
          --live[r];
          break;
      }
      steps_[r].push_back({work, mb, chunk});
      free_at[r] = t + cost;
      moments.insert(free_at[r]);
      if (steps_[r].size() == per_rank) ++finished;
    }
  }
}

double Simulation::mean_idle() const {
  double sum = 0;
  for (double f : idle_fraction) sum += f;
  return idle_fraction.empty() ? 0 : sum / static_cast<double>(idle_fraction.size());
}

Simulation simulate(const Schedule& s, const StepCosts& costs) {
  return simulate(s, std::vector<StepCosts>(s.stages(), costs));
}

Simulation simulate(const Schedule& s, const std::vector<StepCosts>& rank_costs) {
  const int p = s.stages(), m = s.microbatches(), v = s.chunks(), V = s.virtual_stages();
  COLOSSAL_CHECK(static_cast<int>(rank_costs.size()) == p, "[pipeline] simulate: ", rank_costs.size(),
                 " ranks' step costs for ", p, " stages");
  const bool split = s.splits_backward();
  constexpr double kNever = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> f_end(V, std::vector<double>(m, kNever)), b_end = f_end, w_end = f_end;
  std::vector<size_t> next(p, 0);
  std::vector<double> free_at(p, 0.0);
  Simulation out;
  out.busy.assign(p, 0.0);
  out.peak_live.assign(p, 0);
  std::vector<int> live(p, 0);
  // Every rank must run each (work, microbatch, chunk) exactly once.
  for (int r = 0; r < p; ++r) {
    std::vector<int> seen(static_cast<size_t>(4 * m * v), 0);
    for (const auto& st : s.steps(r)) {
      COLOSSAL_CHECK(st.microbatch >= 0 && st.microbatch < m && st.chunk >= 0 && st.chunk < v,
                     "[pipeline] rank ", r, ": step ", to_string(st), " is out of range");
      COLOSSAL_CHECK(split || (st.work != Work::kBackwardInput && st.work != Work::kBackwardWeight), "[pipeline] rank ",
                     r, ": ", to_string(st), " in a schedule that does not split backward");
      COLOSSAL_CHECK(!split || st.work != Work::kBackward, "[pipeline] rank ", r, ": unsplit ", to_string(st),
                     " in a schedule that splits backward");
      COLOSSAL_CHECK(++seen[(static_cast<int>(st.work) * m + st.microbatch) * v + st.chunk] == 1, "[pipeline] rank ", r,
                     ": ", to_string(st), " appears twice");
    }
    const size_t want = static_cast<size_t>(m * v * (split ? 3 : 2));
    COLOSSAL_CHECK(s.steps(r).size() == want, "[pipeline] rank ", r, " has ", s.steps(r).size(), " steps, expected ",
                   want);
  }
  size_t remaining = 0;
  for (int r = 0; r < p; ++r) remaining += s.steps(r).size();
  while (remaining > 0) {
    bool progressed = false;
    for (int r = 0; r < p; ++r) {
      while (next[r] < s.steps(r).size()) {
        const Step& st = s.steps(r)[next[r]];
        const int vs = s.virtual_stage(r, st.chunk), mb = st.microbatch;
        const StepCosts& costs = rank_costs[r];
        double ready = free_at[r], cost = 0;
        switch (st.work) {
          case Work::kForward:
            if (vs > 0) ready = std::max(ready, f_end[vs - 1][mb]);
            cost = costs.forward;
            break;
          case Work::kBackward:
          case Work::kBackwardInput:
            ready = std::max(ready, f_end[vs][mb]);
            if (vs + 1 < V) ready = std::max(ready, b_end[vs + 1][mb]);
            cost = costs.backward_input + (st.work == Work::kBackward ? costs.backward_weight : 0);
            break;
          case Work::kBackwardWeight:
            ready = std::max(ready, b_end[vs][mb]);
            cost = costs.backward_weight;
            break;
        }
        if (ready == kNever) break;  // waits on another rank
        const double end = ready + cost;
        if (st.work == Work::kForward) {
          f_end[vs][mb] = end;
          out.peak_live[r] = std::max(out.peak_live[r], ++live[r]);
        } else if (st.work == Work::kBackwardWeight) {
          w_end[vs][mb] = end;
          --live[r];
        } else {
          b_end[vs][mb] = end;
          if (st.work == Work::kBackward) --live[r];
        }
        out.busy[r] += cost;
        free_at[r] = end;
        ++next[r];
        --remaining;
        progressed = true;
      }
    }
    if (!progressed) {
      std::string stuck;
      for (int r = 0; r < p; ++r)
        if (next[r] < s.steps(r).size())
          stuck += (stuck.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + " at " +
                   to_string(s.steps(r)[next[r]]);
      COLOSSAL_FAIL("[pipeline] the ", to_string(s.kind()), " schedule can never finish: every rank waits on another (",
                    stuck, ")");
    }
  }
  for (int r = 0; r < p; ++r) out.makespan = std::max(out.makespan, free_at[r]);
  for (int r = 0; r < p; ++r) out.idle_fraction.push_back(out.makespan > 0 ? 1.0 - out.busy[r] / out.makespan : 0.0);
  return out;
}

}  // namespace colossal::parallel::pipeline
