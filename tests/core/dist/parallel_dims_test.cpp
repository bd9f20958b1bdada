#include "core/dist/parallel_dims.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "tests/support/errors.h"
#include "tests/support/multirank.h"

namespace colossal::dist {
namespace {

using testing::error_message_of;
using Opts = ParallelDims::Options;

void expect_error(const Opts& o, int world, const std::vector<std::string>& parts) {
  auto msg = error_message_of([&] { ParallelDims d(o, world); });
  for (const auto& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "expected '" << p << "' in: " << msg;
}

TEST(ParallelDims, EveryInvalidCombinationIsNamed) {
  expect_error({.tp = 0}, 4, {"tp: expected >= 1, got 0"});
  expect_error({.sp = -1}, 4, {"sp: expected >= 1, got -1"});
  expect_error({.dp = -2}, 4, {"dp: expected >= 1", "got -2"});
  // Expert parallelism is carved out of the data-parallel ranks.
  expect_error({.dp = 3, .ep = 2}, 6, {"ep 2 does not divide dp 3"});
  expect_error({.ep = 4}, 6, {"ep 4 does not divide dp 6"});
  // Sequence parallelism needs a mode, and split_gather lives on the tp ranks.
  expect_error({.sp = 2}, 4, {"sp 2 needs an sp_mode"});
  expect_error({.sp_mode = "ulysses"}, 4, {"sp_mode 'ulysses'", "split_gather, all_to_all or ring_attn"});
  expect_error({.sp = 2, .sp_mode = "split_gather"}, 4, {"split_gather", "needs tp > 1"});
  expect_error({.sp = 4, .tp = 2, .sp_mode = "split_gather"}, 8, {"sp 4 must be 1 or equal to tp 2"});
  // Against the world: the arithmetic is shown.
  expect_error({.tp = 4}, 6, {"the world of 6 ranks does not divide by pp(1) * sp(1) * tp(4) = 4"});
  expect_error({.dp = 3, .tp = 2}, 4, {"pp(1) * dp(3) * sp(1) * tp(2) = 6 != world size 4"});
  expect_error({.pp = 3}, 4, {"the world of 4 ranks does not divide by pp(3)"});
  expect_error({.dp = 2, .sp = 2, .tp = 2, .sp_mode = "ring_attn"}, 4, {"dp(2) * sp(2) * tp(2) = 8 != world size 4"});
}

TEST(ParallelDims, ResolvesSizes) {
  ParallelDims d({.sp = 2, .tp = 2, .sp_mode = "all_to_all"}, 8);
  EXPECT_EQ(d.dp(), 2);
  EXPECT_EQ(d.sp(), 2);
  EXPECT_EQ(d.tp(), 2);
  EXPECT_EQ(d.edp(), 2);
  EXPECT_EQ(d.sequence_parallel_size(), 2);
  EXPECT_EQ(d.describe(), "pp 1 x dp 2 x sp 2 (all_to_all) x tp 2");
  // split_gather: no sp axis of its own; the sequence is sharded over tp.
  ParallelDims g({.sp = 2, .tp = 2, .sp_mode = "split_gather"}, 4);
  EXPECT_EQ(g.sp(), 1);
  EXPECT_EQ(g.dp(), 2);
  EXPECT_EQ(g.sequence_parallel_size(), 2);
  ParallelDims plain({}, 3);
  EXPECT_EQ(plain.dp(), 3);
  EXPECT_EQ(plain.describe(), "pp 1 x dp 3 x tp 1");
}

// The brute-force rule, written from the definition of the mesh pp x dp x sp x tp (tp fastest):
// a rank's coordinates by repeated division, and a group = the ranks agreeing on every other axis.
struct Coords {
  int dp, sp, tp;
};
Coords brute(int rank, int sp, int tp) { return {rank / (sp * tp), (rank / tp) % sp, rank % tp}; }

std::vector<int> brute_group(int world, int sp, int tp, int rank, bool along_dp, bool along_sp, bool along_tp) {
  auto me = brute(rank, sp, tp);
  std::vector<int> out;
  for (int r = 0; r < world; ++r) {
    auto c = brute(r, sp, tp);
    if ((along_dp || c.dp == me.dp) && (along_sp || c.sp == me.sp) && (along_tp || c.tp == me.tp)) out.push_back(r);
  }
  return out;
}

TEST(ParallelDims, GroupsEqualBruteForceEnumerationOnEightRanks) {
  ParallelDims d({.dp = 2, .sp = 2, .tp = 2, .sp_mode = "ring_attn"}, 8);
  for (int r = 0; r < 8; ++r) {
    EXPECT_EQ(d.group_ranks({Axis::kTp}, r), brute_group(8, 2, 2, r, false, false, true)) << r;
    EXPECT_EQ(d.group_ranks({Axis::kSp}, r), brute_group(8, 2, 2, r, false, true, false)) << r;
    EXPECT_EQ(d.group_ranks({Axis::kDp}, r), brute_group(8, 2, 2, r, true, false, false)) << r;
    EXPECT_EQ(d.group_ranks({Axis::kDp, Axis::kSp}, r), brute_group(8, 2, 2, r, true, true, false)) << r;
    EXPECT_EQ(d.group_ranks({Axis::kSp, Axis::kTp}, r), brute_group(8, 2, 2, r, false, true, true)) << r;
    auto c = brute(r, 2, 2);
    EXPECT_EQ(d.coord(Axis::kDp, r), c.dp);
    EXPECT_EQ(d.coord(Axis::kSp, r), c.sp);
    EXPECT_EQ(d.coord(Axis::kTp, r), c.tp);
  }
}

// The real groups on 8 processes: members as enumerated, and an all-reduce over each adds
// exactly its members' ranks.
TEST(MultiRankParallelDims, GroupsCommunicateAmongTheirMembers) {
  testing::run_ranks(8, [] {
    ParallelDims d({.sp = 2, .tp = 2, .sp_mode = "all_to_all"});
    const int r = rank();
    struct Case {
      Group g;
      std::vector<int> want;
    };
    std::vector<Case> cases = {
        {d.group(Axis::kTp), brute_group(8, 2, 2, r, false, false, true)},
        {d.group(Axis::kSp), brute_group(8, 2, 2, r, false, true, false)},
        {d.group(Axis::kDp), brute_group(8, 2, 2, r, true, false, false)},
        {d.gradient_group(), brute_group(8, 2, 2, r, true, true, false)},
        {d.sequence_group(), brute_group(8, 2, 2, r, false, true, false)},
        {d.group({Axis::kDp, Axis::kSp, Axis::kTp}), brute_group(8, 2, 2, r, true, true, true)},
    };
    for (auto& c : cases) {
      ASSERT_TRUE(c.g.is_member());
      EXPECT_EQ(c.g.ranks(), c.want) << c.g.describe();
      auto t = torch::tensor({static_cast<double>(r)}, torch::kFloat64);
      all_reduce(t, c.g);
      double sum = 0;
      for (int m : c.want) sum += m;
      EXPECT_EQ(t.item<double>(), sum) << c.g.describe();
    }
    // Spanning every rank: the world group itself, not a second backend.
    EXPECT_EQ(cases.back().g.name(), world_group().name());
  });
}

}  // namespace
}  // namespace colossal::dist
