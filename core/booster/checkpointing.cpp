// Booster::save_checkpoint / load_checkpoint: everything needed to resume training.
#include <dirent.h>
#include <sys/stat.h>
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>
#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/booster/booster.h"
#include "core/checkpoint/atomic_file.h"
#include "core/checkpoint/optimizer_io.h"
#include "core/common/check.h"
#include "core/common/log.h"
#include "core/dist/collectives.h"
#include "core/dist/runtime.h"

namespace colossal::booster {
namespace {

bool distributed() { return dist::is_initialized() && dist::world_size() > 1; }
int my_rank() { return dist::is_initialized() ? dist::rank() : 0; }
int world() { return dist::is_initialized() ? dist::world_size() : 1; }
void barrier() {
  if (distributed()) dist::barrier(dist::world_group());
}

bool is_dir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  COLOSSAL_CHECK(in.good(), "[checkpoint] cannot read '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// step-<N> directories under root, oldest first.
std::vector<std::pair<int64_t, std::string>> step_dirs(const std::string& root) {
  std::vector<std::pair<int64_t, std::string>> out;
  if (DIR* d = ::opendir(root.c_str())) {
    while (dirent* e = ::readdir(d)) {
      std::string n = e->d_name;
      if (n.rfind("step-", 0) != 0) continue;
      try {
        out.emplace_back(std::stoll(n.substr(5)), n);
      } catch (...) {
      }
    }
    ::closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

void Booster::save_checkpoint(Boosted& boosted, const std::string& root, const TrainingState& state,
                              const CheckpointOptions& options) {
  auto& wrapper = boosted.optimizer->model_wrapper();
  std::string dir = root + "/step-" + std::to_string(state.step);
  if (my_rank() == 0) {
    ::mkdir(root.c_str(), 0755);
    ::mkdir(dir.c_str(), 0755);
    ::mkdir((dir + "/rng").c_str(), 0755);
  }
  barrier();
  auto params = wrapper.full_model_state(*boosted.model);
  if (my_rank() == 0) {
    checkpoint::save_model_state(params, dir + "/model", options.model);
    // Replicated under the plugins so far: one copy, with how it was laid out.
    checkpoint::save_safetensors(dir + "/optimizer.safetensors",
                                 checkpoint::optimizer_state(boosted.optimizer->inner(), params),
                                 {{"plugin", plugin_->name()},
                                  {"world_size", std::to_string(world())},
                                  {"layout", "replicated"}});
    nlohmann::json js;
    js["step"] = state.step;
    js["epoch"] = state.epoch;
    js["plugin"] = plugin_->name();
    js["world_size"] = world();
    if (boosted.lr_scheduler) js["lr_scheduler_step"] = boosted.lr_scheduler->last_step();
    js["plugin_state"] = wrapper.extra_state();
    if (boosted.sampler) js["sampler"] = boosted.sampler->state_dict();
    checkpoint::write_text_atomically(dir + "/state.json", js.dump(2) + "\n");
  }
  // Every rank's RNG, so dropout and data order continue exactly.
  at::Tensor rng;
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    rng = gen.get_state();
  }
  checkpoint::save_safetensors(dir + "/rng/rank-" + std::to_string(my_rank()) + ".safetensors",
                               {{"cpu", rng}});
  barrier();  // every rank's files are complete
  if (my_rank() == 0) {
    checkpoint::write_text_atomically(root + "/latest", "step-" + std::to_string(state.step) + "\n");
    if (options.keep_last > 0) {
      auto all = step_dirs(root);
      for (size_t i = 0; i + options.keep_last < all.size(); ++i) {
        std::string victim = root + "/" + all[i].second;
        (void)!std::system(("rm -rf '" + victim + "'").c_str());
      }
    }
  }
  barrier();
}

TrainingState Booster::load_checkpoint(Boosted& boosted, const std::string& root) {
  std::string dir = root;
  if (!is_dir(root + "/model")) {
    std::string latest = read_text(root + "/latest");
    latest.erase(latest.find_last_not_of(" \n\r\t") + 1);
    dir = root + "/" + latest;
  }
  auto& wrapper = boosted.optimizer->model_wrapper();
  auto params = wrapper.full_model_state(*boosted.model);
  auto report = checkpoint::load_state_into(params, dir + "/model");
  wrapper.after_model_load();
  checkpoint::CheckpointReader opt_reader(dir, "optimizer");
  checkpoint::load_optimizer_state(boosted.optimizer->inner(), params, opt_reader);

  auto js = nlohmann::json::parse(read_text(dir + "/state.json"), nullptr, false);
  COLOSSAL_CHECK(!js.is_discarded() && js.is_object(), "[checkpoint] '", dir,
                 "/state.json' is not valid JSON");
  TrainingState state;
  state.step = js.value("step", int64_t{0});
  state.epoch = js.value("epoch", int64_t{0});
  if (boosted.lr_scheduler && js.contains("lr_scheduler_step")) {
    boosted.lr_scheduler->set_step(js["lr_scheduler_step"].get<int64_t>());
  }
  if (js.contains("plugin_state")) {
    wrapper.load_extra_state(js["plugin_state"].get<std::map<std::string, double>>());
  }
  int saved_world = js.value("world_size", 1);
  if (boosted.sampler && js.contains("sampler")) {
    auto s = js["sampler"].get<std::map<std::string, int64_t>>();
    if (saved_world == world()) boosted.sampler->load_state_dict(s);
    else boosted.sampler->set_epoch(s.at("epoch"));  // new layout: restart the epoch
  }
  std::string rng_file = dir + "/rng/rank-" + std::to_string(my_rank()) + ".safetensors";
  struct stat st {};
  if (saved_world == world() && ::stat(rng_file.c_str(), &st) == 0) {
    auto f = checkpoint::SafetensorsFile::open(rng_file);
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(f->load("cpu"));
  } else {
    COLOSSAL_LOG_WARN("[checkpoint] saved with ", saved_world, " ranks, running on ", world(),
                      ": random number generators are not restored");
  }
  return state;
}

}  // namespace colossal::booster
