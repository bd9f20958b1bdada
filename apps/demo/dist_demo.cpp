// The built-in default job for now: joins the world, lays it out as a mesh, prints the mesh and
// checks an all-reduce on the world and along each axis against the closed-form answer.
//   colossal run --nproc_per_node 4 -- build/apps/dist_demo
#include <torch/torch.h>

#include <cstdio>

#include "core/common/check.h"
#include "core/common/log.h"
#include "core/dist/collectives.h"
#include "core/dist/mesh.h"
#include "core/dist/runtime.h"

namespace dist = colossal::dist;

namespace {

// Sum over the group's members of (global rank + 1).
double expected_sum(const dist::Group& g) {
  double s = 0;
  for (int r : g.ranks()) s += r + 1;
  return s;
}

bool check_all_reduce(const dist::Group& g, bool verbose) {
  auto t = torch::full({1 << 20}, static_cast<float>(dist::rank() + 1));
  dist::all_reduce(t, g);
  double want = expected_sum(g);
  bool ok = torch::all(t == static_cast<float>(want)).item<bool>();
  if (verbose || !ok)
    COLOSSAL_LOG_INFO_ALL_RANKS("all-reduce on ", g.describe(), ": got ", t[0].item<float>(),
                              ", expected ", want, ok ? " - ok" : " - WRONG");
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    // --iterations N repeats the checks (a longer-running job for failure drills).
    int iterations = 1;
    for (int i = 1; i < argc; ++i) {
      std::string a = argv[i];
      if (a == "--iterations" && i + 1 < argc) iterations = std::stoi(argv[++i]);
      else COLOSSAL_FAIL("unknown argument '", a, "' (expected --iterations N)");
    }
    dist::init();
    int world = dist::world_size();
    int tp = world % 2 == 0 ? 2 : 1;
    dist::ProcessGroupMesh mesh({{"dp", world / tp}, {"tp", tp}});
    if (dist::rank() == 0) {
      std::printf("world of %d rank(s), backend %s, mesh %s\n", world,
                  dist::backend_name().c_str(), mesh.layout().describe().c_str());
      for (int r = 0; r < world; ++r) {
        auto c = mesh.layout().coords_of(r);
        std::printf("  rank %d -> dp %d, tp %d | tp group %s | dp group %s\n", r, c[0], c[1],
                    dist::format_ranks(mesh.layout().group_ranks({"tp"}, r)).c_str(),
                    dist::format_ranks(mesh.layout().group_ranks({"dp"}, r)).c_str());
      }
      std::fflush(stdout);
    }
    bool ok = true;
    for (int it = 0; it < iterations; ++it) {
      ok &= check_all_reduce(dist::world_group(), it == 0);
      ok &= check_all_reduce(mesh.group("dp"), it == 0);
      ok &= check_all_reduce(mesh.group("tp"), it == 0);
    }
    // Every rank learns whether all checks passed everywhere.
    auto flag = torch::tensor({ok ? 0.0f : 1.0f});
    dist::all_reduce(flag, dist::world_group(), dist::ReduceOp::kMax);
    bool all_ok = flag.item<float>() == 0.0f;
    if (dist::rank() == 0) {
      std::printf("all-reduce verified on %d ranks: %s\n", world, all_ok ? "PASS" : "FAIL");
    }
    dist::shutdown();
    return all_ok ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dist_demo: %s\n", colossal::error_text(e).c_str());
    return 1;
  }
}
