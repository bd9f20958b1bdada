// Pipeline schedules as data: for every kind, stage count and microbatch count, each rank runs
// every step once, every forward before its backward and every W after its B, the ranks can
// never wait on each other for ever (so every send meets its receive), the live microbatches
// stay within the schedule's bound, and the simulated bubble matches the textbook formula.
#include <gtest/gtest.h>

#include "core/parallel/pipeline/schedule.h"
#include "tests/support/errors.h"

namespace colossal::parallel::pipeline {
namespace {

Schedule make(const std::string& kind, int p, int m, int chunks = 1) {
  return Schedule({.kind = kind, .stages = p, .microbatches = m, .chunks = chunks});
}

// Within one rank: F(mb, c) before B(mb, c) (or Bi), Bi before W.
void expect_ordered(const Schedule& s) {
  for (int r = 0; r < s.stages(); ++r) {
    std::map<std::pair<int, int>, int> f_at, b_at;
    const auto& steps = s.steps(r);
    for (int i = 0; i < static_cast<int>(steps.size()); ++i) {
      const auto& st = steps[i];
      const auto key = std::make_pair(st.microbatch, st.chunk);
      SCOPED_TRACE(to_string(s.kind()) + " rank " + std::to_string(r) + " " + to_string(st));
      switch (st.work) {
        case Work::kForward: f_at[key] = i; break;
        case Work::kBackward:
        case Work::kBackwardInput:
          ASSERT_TRUE(f_at.count(key)) << "backward before its forward";
          b_at[key] = i;
          break;
        case Work::kBackwardWeight: ASSERT_TRUE(b_at.count(key)) << "W before its B"; break;
      }
    }
  }
}

double bubble_ratio(const Simulation& sim, int r) { return (sim.makespan - sim.busy[r]) / sim.busy[r]; }

TEST(PipelineSchedule, EveryKindIsCompleteOrderedAndFinishes) {
  for (int p : {2, 3, 4}) {
    for (int m : {p, 2 * p, 8}) {
      std::vector<Schedule> all{make("gpipe", p, m), make("1f1b", p, m), make("zbh1", p, m), make("zbv", p, m, 2)};
      if (m % p == 0) {
        all.push_back(make("interleaved", p, m, 2));
        all.push_back(make("interleaved", p, m, 3));
      }
      for (const auto& s : all) {
        SCOPED_TRACE(to_string(s.kind()) + " p " + std::to_string(p) + " m " + std::to_string(m));
        expect_ordered(s);
        const auto sim = simulate(s);  // throws on a missing, repeated or never-runnable step
        for (int r = 0; r < p; ++r) {
          switch (s.kind()) {
            case ScheduleKind::kGPipe: EXPECT_EQ(sim.peak_live[r], m); break;
            case ScheduleKind::k1F1B: EXPECT_EQ(sim.peak_live[r], std::min(m, p - r)) << "rank " << r; break;
            case ScheduleKind::kZBH1: EXPECT_LE(sim.peak_live[r], std::min(m, p)) << "rank " << r; break;
            case ScheduleKind::kZBV: EXPECT_LE(sim.peak_live[r], 2 * p) << "rank " << r; break;
            case ScheduleKind::kInterleaved: {
              const int v = s.chunks(), warmup = m == p ? m * v : std::min((p - r - 1) * 2 + (v - 1) * p, m * v);
              EXPECT_LE(sim.peak_live[r], std::min(m * v, warmup + 1)) << "rank " << r;
              break;
            }
          }
        }
      }
    }
  }
}

TEST(PipelineSchedule, OneFOneBHoldsPMicrobatchesOnTheFirstStage) {
  auto s = make("1f1b", 4, 8);
  // Rank 0: four warm-up forwards, then one forward and one backward in turn.
  std::vector<Work> first;
  for (int i = 0; i < 6; ++i) first.push_back(s.steps(0)[i].work);
  EXPECT_EQ(first, (std::vector<Work>{Work::kForward, Work::kForward, Work::kForward, Work::kForward,
                                      Work::kBackward, Work::kForward}));
  // The last stage alternates from the start.
  EXPECT_EQ(s.steps(3)[0].work, Work::kForward);
  EXPECT_EQ(s.steps(3)[1].work, Work::kBackward);
  EXPECT_EQ(simulate(s).peak_live[0], 4);
}

TEST(PipelineSchedule, SimulatedBubblesMatchTheTheory) {
  for (int p : {2, 4}) {
    for (int m : {p, 4, 8, 16}) {
      if (m < p || (m == 4 && p == 4)) continue;
      SCOPED_TRACE("p " + std::to_string(p) + " m " + std::to_string(m));
      // With F = B = W = 1 the formulas are exact for gpipe, 1f1b and interleaved.
      for (const auto& s : {make("gpipe", p, m), make("1f1b", p, m), make("interleaved", p, m, 2)}) {
        const auto sim = simulate(s);
        for (int r = 0; r < p; ++r) EXPECT_NEAR(bubble_ratio(sim, r), s.theoretical_bubble(), 1e-9) << to_string(s.kind());
      }
      // Zero bubble. ZB-H1 within 1F1B's peak memory: its formula, (p-1)/(3m), when m = p, and
      // at most two step-times over it otherwise (the list scheduler's switch from warm-up to
      // steady state; README, pipeline). ZB-V (two half-size chunks per rank) below ZB-H1.
      const auto one = simulate(make("1f1b", p, m)), h1 = simulate(make("zbh1", p, m)), zv = simulate(make("zbv", p, m, 2));
      const double theory_h1 = make("zbh1", p, m).theoretical_bubble();
      for (int r = 0; r < p; ++r) {
        if (m == p) EXPECT_NEAR(bubble_ratio(h1, r), theory_h1, 1e-9) << "zbh1 rank " << r;
        EXPECT_LE(bubble_ratio(h1, r), (p + 1) / (3.0 * m) + 1e-9) << "zbh1 rank " << r;
        EXPECT_LT(bubble_ratio(h1, r), bubble_ratio(one, r)) << "zbh1 rank " << r;
      }
      for (int r = 0; r < p; ++r) EXPECT_LE(bubble_ratio(zv, r), bubble_ratio(h1, r) + 1e-9) << "zbv rank " << r;
    }
  }
}

// Unequal stages (what a benchmark measures): the slow stage sets the pace. 1F1B on 2 stages
// with the second twice as slow: its first input after one fast F, then m x (F + B) of its own,
// then the fast stage's last B.
TEST(PipelineSchedule, UnequalStagesAreSimulatedWithTheirOwnCosts) {
  const auto s = make("1f1b", 2, 4);
  const auto sim = simulate(s, std::vector<StepCosts>{{1, 2, 0}, {2, 4, 0}});
  EXPECT_DOUBLE_EQ(sim.makespan, 1 + 4 * 6 + 2);
  EXPECT_DOUBLE_EQ(sim.busy[0], 4 * 3);
  EXPECT_NEAR(sim.idle_fraction[1], 1 - 24.0 / 27, 1e-12);
  auto msg = testing::error_message_of([&] { simulate(s, std::vector<StepCosts>(3)); });
  EXPECT_NE(msg.find("3 ranks' step costs for 2 stages"), std::string::npos) << msg;
}

// Orders built from measured costs (what the runner does after its first step): complete,
// ordered, within the live bound, and for zbh1/zbv on costs like the LLaMA stages' (W 0.8x F,
// B 1.2x F, one stage 8% slower) they idle less than the unit-cost order on the same costs.
TEST(PipelineSchedule, OrdersFromMeasuredCostsFinishAndIdleLess) {
  const std::vector<StepCosts> two = {{0.125, 0.146, 0.109}, {0.135, 0.148, 0.121}};
  for (int p : {2, 4}) {
    std::vector<StepCosts> costs;
    for (int r = 0; r < p; ++r) costs.push_back(two[r % 2]);
    for (int m : {p, 8}) {
      for (const auto& [kind, chunks] : std::vector<std::pair<std::string, int>>{{"1f1b", 1}, {"zbh1", 1}, {"zbv", 2}}) {
        SCOPED_TRACE(kind + " p " + std::to_string(p) + " m " + std::to_string(m));
        const Schedule unit({.kind = kind, .stages = p, .microbatches = m, .chunks = chunks});
        const Schedule measured({.kind = kind, .stages = p, .microbatches = m, .chunks = chunks, .costs = costs});
        expect_ordered(measured);
        const auto sim = simulate(measured, costs);
        for (int r = 0; r < p; ++r) EXPECT_LE(sim.peak_live[r], (chunks == 2 ? 2 : 1) * std::min(m, p)) << r;
        // The greedy order is not always better (zbh1 at p 4 with m 4 is not); the runner keeps
        // whichever simulates faster. Where the schedule has room (m 8) it is.
        if (kind != "1f1b" && m == 8) EXPECT_LT(sim.mean_idle(), simulate(unit, costs).mean_idle());
      }
    }
  }
  auto msg = testing::error_message_of(
      [] { Schedule({.kind = "zbh1", .stages = 2, .microbatches = 4, .costs = {{1, 1, 1}}}); });
  EXPECT_NE(msg.find("step costs for 1 ranks, expected one per stage (2)"), std::string::npos) << msg;
  msg = testing::error_message_of(
      [] { Schedule({.kind = "zbh1", .stages = 2, .microbatches = 4, .costs = {{1, 1, 1}, {1, 0, 1}}}); });
  EXPECT_NE(msg.find("step costs must be positive"), std::string::npos) << msg;
}

TEST(PipelineSchedule, InvalidCombinationsAreNamed) {
  auto msg = testing::error_message_of([] { make("1f1b", 4, 3); });
  EXPECT_NE(msg.find("num_microbatches 3 < pp 4"), std::string::npos) << msg;
  msg = testing::error_message_of([] { make("interleaved", 2, 4, 1); });
  EXPECT_NE(msg.find("interleaved needs num_model_chunks >= 2"), std::string::npos) << msg;
  msg = testing::error_message_of([] { make("interleaved", 4, 6, 2); });
  EXPECT_NE(msg.find("num_microbatches (6) to be a multiple of pp (4)"), std::string::npos) << msg;
  msg = testing::error_message_of([] { make("zbv", 2, 4, 1); });
  EXPECT_NE(msg.find("zbv runs exactly 2 model chunks"), std::string::npos) << msg;
  msg = testing::error_message_of([] { make("1f1b", 2, 4, 2); });
  EXPECT_NE(msg.find("runs one model chunk per rank"), std::string::npos) << msg;
  msg = testing::error_message_of([] { make("pipedream", 2, 4); });
  EXPECT_NE(msg.find("schedule 'pipedream': expected gpipe, 1f1b, interleaved, zbh1 or zbv"), std::string::npos) << msg;
}

TEST(PipelineSchedule, ABrokenOrderIsCaught) {
  const ScheduleOptions o{.kind = "1f1b", .stages = 2, .microbatches = 2};
  // Rank 0 waits for microbatch 1's gradient before sending microbatch 1 forward: a deadlock.
  Schedule deadlock(o, {{{Work::kForward, 0, 0}, {Work::kBackward, 0, 0}, {Work::kBackward, 1, 0}, {Work::kForward, 1, 0}},
                        {{Work::kForward, 0, 0}, {Work::kBackward, 0, 0}, {Work::kForward, 1, 0}, {Work::kBackward, 1, 0}}});
  auto msg = testing::error_message_of([&] { simulate(deadlock); });
  EXPECT_NE(msg.find("can never finish"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rank 0 at B(mb 1, chunk 0)"), std::string::npos) << msg;
  Schedule missing(o, {{{Work::kForward, 0, 0}, {Work::kBackward, 0, 0}, {Work::kForward, 1, 0}},
                       {{Work::kForward, 0, 0}, {Work::kBackward, 0, 0}, {Work::kForward, 1, 0}, {Work::kBackward, 1, 0}}});
  msg = testing::error_message_of([&] { simulate(missing); });
  EXPECT_NE(msg.find("rank 0 has 3 steps, expected 4"), std::string::npos) << msg;
}

}  // namespace
}  // namespace colossal::parallel::pipeline
