#include "core/dist/mesh.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>

#include "core/common/check.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "tests/support/errors.h"
#include "tests/support/multirank.h"

namespace colossal::dist {
namespace {

using Shape = std::vector<MeshAxis>;

// Brute force: every rank's coordinates by counting, and groups as "ranks whose coordinates
// agree outside the selected axes", ordered by the selected coordinates in mesh order.
std::vector<std::vector<int>> brute_coords(const Shape& shape) {
  std::vector<std::vector<int>> coords;
  std::vector<int> c(shape.size(), 0);
  int total = 1;
  for (const auto& a : shape) total *= a.size;
  for (int r = 0; r < total; ++r) {
    coords.push_back(c);
    for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {  // odometer, last fastest
      if (++c[i] < shape[i].size) break;
      c[i] = 0;
    }
  }
  return coords;
}

// Calls fn(names, indices) for every non-empty subset of the mesh's axes.
void for_each_axis_subset(const Shape& shape,
                          const std::function<void(const std::vector<std::string>&,
                                                   const std::set<int>&)>& fn) {
  int n = static_cast<int>(shape.size());
  for (int mask = 1; mask < (1 << n); ++mask) {
    std::vector<std::string> along;
    std::set<int> idx;
    for (int i = 0; i < n; ++i)
      if (mask & (1 << i)) {
        along.push_back(shape[i].name);
        idx.insert(i);
      }
    fn(along, idx);
  }
}

std::vector<int> brute_group(const Shape& shape, const std::set<int>& along, int rank) {
  auto coords = brute_coords(shape);
  std::vector<int> members;
  for (int r = 0; r < static_cast<int>(coords.size()); ++r) {
    bool same = true;
    for (size_t i = 0; i < shape.size(); ++i)
      if (!along.count(static_cast<int>(i)) && coords[r][i] != coords[rank][i]) same = false;
    if (same) members.push_back(r);  // increasing rank = row-major order of the selected coords
  }
  return members;
}

TEST(MeshLayout, MatchesBruteForceOnManyShapes) {
  std::vector<Shape> shapes = {
      {{"dp", 1}},
      {{"dp", 2}},
      {{"dp", 2}, {"tp", 2}},
      {{"dp", 4}},
      {{"pp", 2}, {"dp", 2}, {"tp", 2}},
      {{"dp", 2}, {"tp", 4}},
      {{"pp", 4}, {"tp", 2}},
      {{"pp", 2}, {"dp", 1}, {"sp", 2}, {"tp", 2}},
      {{"dp", 8}},
  };
  for (const auto& shape : shapes) {
    MeshLayout layout(shape);
    auto coords = brute_coords(shape);
    ASSERT_EQ(layout.num_ranks(), static_cast<int>(coords.size())) << layout.describe();
    for (int r = 0; r < layout.num_ranks(); ++r) {
      EXPECT_EQ(layout.coords_of(r), coords[r]) << layout.describe() << " rank " << r;
      EXPECT_EQ(layout.rank_of(coords[r]), r);
    }
    for_each_axis_subset(shape, [&](const std::vector<std::string>& along,
                                    const std::set<int>& idx) {
      std::vector<bool> covered(layout.num_ranks(), false);
      for (int r = 0; r < layout.num_ranks(); ++r) {
        auto got = layout.group_ranks(along, r);
        EXPECT_EQ(got, brute_group(shape, idx, r)) << layout.describe() << " rank " << r;
      }
      for (const auto& g : layout.all_groups(along))
        for (int m : g) {
          EXPECT_FALSE(covered[m]) << "rank " << m << " in two groups";
          covered[m] = true;
        }
      for (bool c : covered) EXPECT_TRUE(c) << "all_groups must partition the world";
    });
  }
}

TEST(MeshLayout, TpIsInnermost) {
  MeshLayout layout({{"pp", 2}, {"dp", 2}, {"tp", 2}});
  EXPECT_EQ(layout.group_ranks({"tp"}, 0), (std::vector<int>{0, 1}));
  EXPECT_EQ(layout.group_ranks({"dp"}, 0), (std::vector<int>{0, 2}));
  EXPECT_EQ(layout.group_ranks({"pp"}, 3), (std::vector<int>{3, 7}));
  EXPECT_EQ(layout.group_ranks({"tp", "dp"}, 5), (std::vector<int>{4, 5, 6, 7}));
}

TEST(MeshLayout, BadShapesAndNamesAreExplained) {
  auto msg = testing::error_message_of;
  EXPECT_NE(msg([] { MeshLayout({{"dp", 2}, {"dp", 2}}); }).find("axis 'dp' appears twice"),
            std::string::npos);
  EXPECT_NE(msg([] { MeshLayout({{"tp", 0}}); }).find("expected size >= 1, got 0"),
            std::string::npos);
  MeshLayout l({{"dp", 2}, {"tp", 2}});
  EXPECT_NE(msg([&] { l.group_ranks({"pp"}, 0); }).find("no axis named 'pp' in mesh dp=2 x tp=2"),
            std::string::npos);
  EXPECT_NE(msg([&] { l.coords_of(4); }).find("rank 4 is outside mesh"), std::string::npos);
}

// Real groups on real ranks: each group's all-reduce of (global rank + 1) must equal the sum over
// the brute-force membership, and an all-gather of global ranks must list the members in order.
void check_mesh_groups(const Shape& shape) {
  ProcessGroupMesh mesh(shape);
  for_each_axis_subset(shape, [&](const std::vector<std::string>& along, const std::set<int>& idx) {
    auto expected = brute_group(shape, idx, rank());
    Group g = mesh.group(along);
    ASSERT_TRUE(g.is_member());
    EXPECT_EQ(g.ranks(), expected);
    auto t = torch::tensor({static_cast<double>(rank() + 1)}, torch::kFloat64);
    all_reduce(t, g);
    double want = 0;
    for (int r : expected) want += r + 1;
    EXPECT_EQ(t.item<double>(), want) << g.describe();
    auto mine = torch::tensor({static_cast<int64_t>(rank())});
    auto all = torch::empty({g.size()}, torch::kInt64);
    all_gather(all, mine, g);
    std::vector<int64_t> got(all.data_ptr<int64_t>(), all.data_ptr<int64_t>() + g.size());
    EXPECT_EQ(got, std::vector<int64_t>(expected.begin(), expected.end())) << g.describe();
    // Asking again returns the cached group (same state, no new rendezvous).
    EXPECT_EQ(&mesh.group(along).state(), &g.state());
  });
}

TEST(MultiRankMesh, OneRank) {
  testing::run_ranks(1, [] { check_mesh_groups({{"dp", 1}, {"tp", 1}}); });
}
TEST(MultiRankMesh, TwoRanks) {
  testing::run_ranks(2, [] { check_mesh_groups({{"dp", 1}, {"tp", 2}}); });
}
TEST(MultiRankMesh, FourRanks) {
  testing::run_ranks(4, [] { check_mesh_groups({{"dp", 2}, {"tp", 2}}); });
}
TEST(MultiRankMesh, EightRanksTwoByTwoByTwo) {
  testing::run_ranks(8, [] { check_mesh_groups({{"pp", 2}, {"dp", 2}, {"tp", 2}}); });
}

TEST(MultiRankMesh, ShapeThatDoesNotMatchTheWorldIsRejected) {
  testing::run_ranks(2, [] {
    try {
      ProcessGroupMesh mesh({{"dp", 2}, {"tp", 2}});
      ADD_FAILURE() << "a 4-rank mesh on 2 ranks must be rejected";
    } catch (const std::exception& e) {
      EXPECT_NE(error_text(e).find("dp(2) * tp(2) = 4 != world size 2"), std::string::npos)
          << error_text(e);
    }
  });
}

}  // namespace
}  // namespace colossal::dist
