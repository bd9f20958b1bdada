#include "core/launch/verify.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/common/check.h"
#include "core/common/fs.h"

namespace colossal::launch {
namespace {

// A launch with `env` set for its ranks (they inherit the launcher's environment).
int launch_with(const LaunchOptions& options, const std::vector<std::pair<std::string, std::string>>& env,
                const std::vector<std::string>& unset) {
  for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
  for (const auto& k : unset) ::unsetenv(k.c_str());
  return run(options);
}

std::string make_work_dir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/colossal-verify-XXXXXX";
  COLOSSAL_CHECK(::mkdtemp(pattern.data()) != nullptr, "cannot create a directory like '", pattern, "'");
  return pattern;
}

}  // namespace

void VerifyOptions::validate() const {
  COLOSSAL_CHECK(!launch.command.empty(), "colossal verify: no program (give it after --: colossal verify "
                 "--nproc_per_node 2 -- train_llama --plugin hybrid --tp 2)");
  launch.validate();
  COLOSSAL_CHECK(launch.nnodes == 1 && launch.hostfile.empty(),
                 "colossal verify runs on one node (--nnodes ", launch.nnodes,
                 "); the same layout on one node's ranks checks the same arithmetic");
  COLOSSAL_CHECK(steps >= 1, "--steps: expected >= 1, got ", steps);
  for (auto [name, v] : {std::pair{"--loss_rtol", tolerances.loss}, {"--grad_rtol", tolerances.gradient},
                         {"--param_rtol", tolerances.parameter}})
    COLOSSAL_CHECK(v < 1, name, ": expected a relative tolerance below 1, got ", v);  // < 0: the default
  COLOSSAL_CHECK(tolerances.loss_abs >= 0, "--loss_atol: expected >= 0, got ", tolerances.loss_abs);
}

int verify(const VerifyOptions& options) {
  options.validate();
  const bool own_dir = options.work_dir.empty();
  const std::string dir = own_dir ? make_work_dir() : options.work_dir;
  fs::make_dirs(dir);
  const std::string layout_dir = dir + "/layout", reference_dir = dir + "/reference";
  fs::remove_all(layout_dir);
  fs::remove_all(reference_dir);
  const int world = options.launch.nproc_per_node;
  const std::string steps = std::to_string(options.steps);
  auto finish = [&](int rc) {
    if (own_dir && !options.keep) fs::remove_all(dir);
    else std::printf("recordings kept in %s\n", dir.c_str());
    return rc;
  };

  std::printf("== colossal verify: the layout, %d rank(s), %s step(s)\n", world, steps.c_str());
  std::fflush(stdout);
  int rc = launch_with(options.launch, {{"COLOSSAL_VERIFY_DIR", layout_dir}, {"COLOSSAL_VERIFY_STEPS", steps}},
                       {"COLOSSAL_VERIFY_REFERENCE_FOR"});
  if (rc != 0) {
    std::fprintf(stderr, "colossal verify: the layout run failed (exit %d); nothing to compare\n", rc);
    return finish(2);
  }

  // The reference never runs with a deliberately injected fault: it is the oracle.
  std::printf("== colossal verify: one process, the same global batch\n");
  std::fflush(stdout);
  LaunchOptions one = options.launch;
  one.nproc_per_node = 1;
  one.tee.reset();
  rc = launch_with(one,
                   {{"COLOSSAL_VERIFY_DIR", reference_dir},
                    {"COLOSSAL_VERIFY_STEPS", steps},
                    {"COLOSSAL_VERIFY_REFERENCE_FOR", std::to_string(world)}},
                   {"COLOSSAL_INJECT_FAULT"});
  if (rc != 0) {
    std::fprintf(stderr, "colossal verify: the one-process reference failed (exit %d); nothing to compare\n", rc);
    return finish(2);
  }

  const auto report = booster::compare_recordings(layout_dir, reference_dir, options.tolerances);
  std::printf("\n== colossal verify: the layout against one process\n%s", report.text().c_str());
  std::fflush(stdout);
  return finish(report.passed() ? 0 : 1);
}

}  // namespace colossal::launch
