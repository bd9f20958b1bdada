#include "core/dist/collectives.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/common/check.h"
#include "core/dist/runtime.h"
#include "tests/support/errors.h"
#include "tests/support/multirank.h"

namespace colossal::dist {
namespace {

// Every collective on one group, checked against values each rank can compute on its own.
// Values depend on group ranks and global ranks so a wrong membership or order shows up.
void check_collectives(const Group& g) {
  const int n = g.size();
  const int me = g.rank();
  SCOPED_TRACE(g.describe());

  // all_reduce: sum / avg / max / min / product, several dtypes.
  for (auto dtype : {torch::kFloat32, torch::kFloat64, torch::kInt64, torch::kBFloat16}) {
    auto t = torch::full({7}, me + 1, torch::TensorOptions().dtype(dtype));
    all_reduce(t, g);
    EXPECT_TRUE(torch::all(t == n * (n + 1) / 2).item<bool>()) << "sum " << dtype << " " << t;
  }
  auto avg = torch::full({5}, static_cast<float>(me), torch::kFloat32);
  all_reduce(avg, g, ReduceOp::kAvg);
  EXPECT_TRUE(torch::allclose(avg, torch::full({5}, (n - 1) / 2.0f))) << avg;
  auto mx = torch::tensor({static_cast<float>(me), static_cast<float>(-me)});
  all_reduce(mx, g, ReduceOp::kMax);
  EXPECT_EQ(mx[0].item<float>(), n - 1);
  EXPECT_EQ(mx[1].item<float>(), 0);
  auto mn = torch::tensor({static_cast<float>(me + 1)});
  all_reduce(mn, g, ReduceOp::kMin);
  EXPECT_EQ(mn.item<float>(), 1);
  auto prod = torch::tensor({static_cast<double>(me + 1)}, torch::kFloat64);
  all_reduce(prod, g, ReduceOp::kProduct);
  double fact = 1;
  for (int i = 1; i <= n; ++i) fact *= i;
  EXPECT_EQ(prod.item<double>(), fact);

  // reduce_scatter: input row block k holds (me + 1) * (k + 1); rank k gets sum over ranks.
  const int rows = 3;
  auto in = torch::empty({n * rows, 2});
  for (int k = 0; k < n; ++k) in.slice(0, k * rows, (k + 1) * rows).fill_((me + 1) * (k + 1));
  auto out = torch::empty({rows, 2});
  reduce_scatter(out, in, g);
  EXPECT_TRUE(torch::all(out == (me + 1) * n * (n + 1) / 2).item<bool>()) << out;
  auto out_avg = torch::empty({rows, 2});
  reduce_scatter(out_avg, in, g, ReduceOp::kAvg);
  EXPECT_TRUE(torch::allclose(out_avg, torch::full({rows, 2}, (me + 1) * (n + 1) / 2.0f)));

  // all_gather: chunk k comes from group rank k, which knows its global rank.
  auto mine = torch::full({2, 3}, static_cast<float>(g.global_rank(me) * 10 + me));
  auto gathered = torch::empty({n * 2, 3});
  all_gather(gathered, mine, g);
  for (int k = 0; k < n; ++k) {
    EXPECT_TRUE(torch::all(gathered.slice(0, 2 * k, 2 * k + 2) == g.global_rank(k) * 10 + k)
                    .item<bool>())
        << "chunk " << k << " " << gathered;
  }

  // broadcast from every source.
  for (int src = 0; src < n; ++src) {
    auto b = me == src ? torch::arange(6, torch::kFloat32) * (src + 1) : torch::zeros({6});
    broadcast(b, src, g);
    EXPECT_TRUE(torch::equal(b, torch::arange(6, torch::kFloat32) * (src + 1))) << "src " << src;
  }

  // all_to_all, even splits: row block k goes to rank k.
  auto a2a_in = torch::empty({n * 2, 2});
  for (int k = 0; k < n; ++k) a2a_in.slice(0, 2 * k, 2 * k + 2).fill_(me * 100 + k);
  auto a2a_out = torch::empty({n * 2, 2});
  all_to_all(a2a_out, a2a_in, g);
  for (int j = 0; j < n; ++j) {
    EXPECT_TRUE(torch::all(a2a_out.slice(0, 2 * j, 2 * j + 2) == j * 100 + me).item<bool>())
        << "from " << j;
  }

  // all_to_all, uneven: rank i sends (i + k + 1) rows to rank k, rank k receives (j + k + 1) from j.
  std::vector<int64_t> in_splits, out_splits;
  for (int k = 0; k < n; ++k) in_splits.push_back(me + k + 1);
  for (int j = 0; j < n; ++j) out_splits.push_back(j + me + 1);
  int64_t in_rows = 0, out_rows = 0;
  for (auto s : in_splits) in_rows += s;
  for (auto s : out_splits) out_rows += s;
  auto u_in = torch::empty({in_rows, 3}, torch::kFloat64);
  int64_t off = 0;
  for (int k = 0; k < n; ++k) {
    for (int64_t r = 0; r < in_splits[k]; ++r) u_in[off + r].fill_(me * 10000 + k * 100 + r);
    off += in_splits[k];
  }
  auto u_out = torch::full({out_rows, 3}, -1.0, torch::kFloat64);
  all_to_all(u_out, u_in, g, out_splits, in_splits);
  off = 0;
  for (int j = 0; j < n; ++j) {
    for (int64_t r = 0; r < out_splits[j]; ++r) {
      EXPECT_TRUE(torch::all(u_out[off + r] == j * 10000 + me * 100 + r).item<bool>())
          << "row " << r << " from " << j << ": " << u_out[off + r];
    }
    off += out_splits[j];
  }

  // send / recv around a ring (even ranks send first, odd ranks receive first).
  if (n > 1) {
    int next = (me + 1) % n, prev = (me + n - 1) % n;
    auto payload = torch::full({4}, static_cast<float>(me));
    auto got = torch::empty({4});
    if (me % 2 == 0) {
      send(payload, next, g);
      recv(got, prev, g);
    } else {
      recv(got, prev, g);
      send(payload, next, g);
    }
    EXPECT_TRUE(torch::all(got == prev).item<bool>()) << got;
  }

  barrier(g);

  // Async handles: two in flight at once, completed in reverse order.
  auto x = torch::ones({16});
  auto y = torch::full({16}, 2.0f);
  auto hx = all_reduce_async(x, g);
  auto hy = all_reduce_async(y, g);
  hy.wait();
  hx.wait();
  EXPECT_TRUE(torch::all(x == n).item<bool>());
  EXPECT_TRUE(torch::all(y == 2 * n).item<bool>());
}

// Argument errors are explained and do not break the group.
void check_argument_errors(const Group& g) {
  auto msg = testing::error_message_of;
  int n = g.size();
  auto out = torch::empty({3});
  auto bad_in = torch::empty({3 * n + 1});
  EXPECT_NE(msg([&] { reduce_scatter(out, bad_in, g); }).find("reduce_scatter: input has"),
            std::string::npos);
  auto nc = torch::empty({4, 4}).t();
  EXPECT_NE(msg([&] { all_reduce(nc, g); }).find("must be contiguous"), std::string::npos);
  auto a = torch::empty({n * 2});
  std::vector<int64_t> too_many(n + 1, 1);
  EXPECT_NE(msg([&] { all_to_all(a, a, g, too_many, too_many); })
                .find("expected " + std::to_string(n) + " splits"),
            std::string::npos);
  auto b = torch::empty({2});
  EXPECT_NE(msg([&] { broadcast(b, n, g); }).find("is not a rank of"), std::string::npos);
  auto ok = torch::ones({1});
  all_reduce(ok, g);  // still usable
  EXPECT_EQ(ok.item<float>(), n);
}

TEST(MultiRankCollectives, OneRank) {
  testing::run_ranks(1, [] {
    check_collectives(world_group());
    check_argument_errors(world_group());
  });
}

TEST(MultiRankCollectives, TwoRanks) {
  testing::run_ranks(2, [] {
    check_collectives(world_group());
    check_argument_errors(world_group());
  });
}

TEST(MultiRankCollectives, FourRanksWorldAndSubgroups) {
  testing::run_ranks(4, [] {
    check_collectives(world_group());
    // Contiguous pairs, a strided pair, and a reversed non-contiguous pair (group rank 0 is
    // global rank 3): membership and order must follow the list given.
    for (const auto& [name, members] :
         std::vector<std::pair<std::string, std::vector<std::vector<int>>>>{
             {"pairs", {{0, 1}, {2, 3}}}, {"strided", {{0, 2}, {1, 3}}}, {"reversed", {{3, 1}}}}) {
      for (const auto& m : members) {
        Group g = new_group(m, name);
        if (!g.is_member()) continue;
        EXPECT_EQ(g.ranks(), m);
        check_collectives(g);
      }
    }
    check_argument_errors(new_group({0, 1, 2, 3}, "again"));
  });
}

TEST(MultiRankCollectives, NonMembersGetNoGroup) {
  testing::run_ranks(2, [] {
    Group g = new_group({1}, "solo");
    EXPECT_EQ(g.is_member(), rank() == 1);
    if (g.is_member()) EXPECT_EQ(g.size(), 1);
    try {
      new_group({0, 2}, "outside");
      ADD_FAILURE() << "rank 2 does not exist";
    } catch (const std::exception& e) {
      EXPECT_NE(error_text(e).find("rank 2 is outside the world [0, 2)"), std::string::npos);
    }
  });
}

}  // namespace
}  // namespace colossal::dist

namespace colossal::dist {
namespace {

// Shared memory (the default for members on one host) against Gloo over TCP on the same data:
// integer-valued floats make every sum exact, so the results must be identical whatever order
// each transport adds in. Sizes cross the 8 MiB chunk and are not multiples of the group size.
TEST(MultiRankCollectives, SharedMemoryMatchesGloo) {
  testing::run_ranks(3, [] {
    Group shm = world_group();
    ASSERT_NE(shm.state().shm, nullptr) << "ranks on one host should get the shared-memory transport";
    ::setenv("COLOSSAL_SHM", "0", 1);
    Group tcp = new_group({0, 1, 2}, "gloo-only");
    ::unsetenv("COLOSSAL_SHM");
    ASSERT_EQ(tcp.state().shm, nullptr);
    const int n = 3;
    torch::manual_seed(100 + rank());
    for (auto dtype : {torch::kFloat32, torch::kBFloat16}) {
      SCOPED_TRACE(c10::toString(dtype));
      for (int64_t numel : {int64_t{1}, int64_t{1000}, int64_t{3'000'001}}) {
        auto x = torch::randint(-100, 100, {numel}).to(dtype);
        auto a = x.clone(), b = x.clone();
        all_reduce(a, shm);
        all_reduce(b, tcp);
        EXPECT_TRUE(torch::equal(a, b)) << "all_reduce of " << numel;
        auto avg_a = x.clone(), avg_b = x.clone();
        all_reduce(avg_a, shm, ReduceOp::kAvg);
        all_reduce(avg_b, tcp, ReduceOp::kAvg);
        EXPECT_TRUE(torch::equal(avg_a, avg_b)) << "average of " << numel;
        // Every member holds the same bits.
        auto all = torch::empty({n * numel}, x.options());
        all_gather(all, avg_a, tcp);
        for (int k = 0; k < n; ++k) EXPECT_TRUE(torch::equal(all.narrow(0, k * numel, numel), avg_a));

        auto in = torch::randint(-100, 100, {n * numel}).to(dtype);
        auto rs_a = torch::empty({numel}, x.options()), rs_b = torch::empty({numel}, x.options());
        reduce_scatter(rs_a, in, shm);
        reduce_scatter(rs_b, in, tcp);
        EXPECT_TRUE(torch::equal(rs_a, rs_b)) << "reduce_scatter of " << numel;
        auto ag_a = torch::empty({n * numel}, x.options()), ag_b = torch::empty({n * numel}, x.options());
        all_gather(ag_a, x, shm);
        all_gather(ag_b, x, tcp);
        EXPECT_TRUE(torch::equal(ag_a, ag_b)) << "all_gather of " << numel;
      }
    }
    // Integer tensors are not carried by shared memory; they still work (through Gloo).
    auto i = torch::full({4}, rank() + 1, torch::kInt64);
    all_reduce(i, shm);
    EXPECT_TRUE(torch::all(i == 6).item<bool>());
  });
}

TEST(MultiRankCollectives, SharedMemoryNamesMismatchedCalls) {
  testing::run_ranks(2, [] {
    auto t = torch::ones({rank() == 0 ? 10 : 12});
    auto msg = testing::error_message_of([&] { all_reduce(t, world_group()); });
    EXPECT_NE(msg.find("members disagree"), std::string::npos) << msg;
    EXPECT_NE(msg.find(rank() == 0 ? "called all_reduce on 10 elements of Float, member 1 called all_reduce on 12"
                                   : "called all_reduce on 12 elements of Float, member 0 called all_reduce on 10"),
              std::string::npos)
        << msg;
  });
}

}  // namespace
}  // namespace colossal::dist
