// The store-heavy proof for the Gloo headers (core/dist/README.md): many Gloo groups rendezvous
// through the TCPStore (each creation exercises Gloo's store calls through libtorch's GlooStore),
// and the store itself is hammered from every rank at once.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "core/dist/collectives.h"
#include "core/dist/runtime.h"
#include "tests/support/multirank.h"

namespace colossal::dist {
namespace {

TEST(MultiRankStore, SixtyFourGroupsAndBusyStore) {
  testing::run_ranks(4, [] {
    const int n = world_size();
    for (int i = 0; i < 64; ++i) {
      // Alternate whole-world groups, rotated orders and pairs so memberships differ.
      std::vector<int> members;
      if (i % 3 == 0) {
        for (int k = 0; k < n; ++k) members.push_back((k + i) % n);
      } else {
        members = {i % n, (i + 1 + i % (n - 1)) % n};
        if (members[0] == members[1]) members[1] = (members[1] + 1) % n;
      }
      Group g = new_group(members, "stress" + std::to_string(i));
      if (!g.is_member()) continue;
      auto t = torch::full({3}, static_cast<float>(rank() + i));
      all_reduce(t, g);
      float want = 0;
      for (int m : members) want += m + i;
      ASSERT_EQ(t[0].item<float>(), want) << g.describe();
    }
    auto s = store();
    for (int i = 0; i < 200; ++i) {
      std::string key = "stress/" + std::to_string(rank()) + "/" + std::to_string(i);
      s->set(key, std::vector<uint8_t>{static_cast<uint8_t>(i)});
      s->add("stress/counter", 1);
    }
    barrier(world_group());
    EXPECT_EQ(s->add("stress/counter", 0), 200 * n);
    for (int r = 0; r < n; ++r) {
      auto v = s->get("stress/" + std::to_string(r) + "/199");
      ASSERT_EQ(v.size(), 1u);
      EXPECT_EQ(v[0], 199);
    }
  });
}

}  // namespace
}  // namespace colossal::dist
