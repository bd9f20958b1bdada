// Booster::save_model / load_model and save_checkpoint / load_checkpoint.
#include <sys/stat.h>
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>
#include <algorithm>
#include <fstream>
#include <set>
#include <thread>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/booster/booster.h"
#include "core/checkpoint/atomic_file.h"
#include "core/checkpoint/optimizer_io.h"
#include "core/common/check.h"
#include "core/common/fs.h"
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
  for (const auto& n : fs::list_dir(root)) {
    if (n.rfind("step-", 0) != 0) continue;
    try {
      out.emplace_back(std::stoll(n.substr(5)), n);
    } catch (...) {
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

namespace {

// What one rank writes of the optimizer state: its slices under a sharding plugin (every rank,
// optimizer/rank-R.safetensors), the whole state otherwise (rank 0, optimizer.safetensors).
struct OptimizerFiles {
  bool sliced = false, writes = false;
  checkpoint::NamedTensors tensors;
  std::map<std::string, std::string> metadata;
};

OptimizerFiles collect_optimizer_state(const CheckpointLayout& layout, const torch::optim::Optimizer& optimizer,
                                       const torch::nn::Module& model, const std::string& plugin) {
  OptimizerFiles f;
  f.sliced = layout.optimizer_sharded();
  f.writes = f.sliced || my_rank() == 0;
  f.metadata = {{"plugin", plugin},
                {"world_size", std::to_string(world())},
                {"rank", std::to_string(my_rank())},
                {"layout", f.sliced ? "sliced" : "replicated"}};
  if (!f.writes || (f.sliced && !layout.writes_optimizer_slices())) return f;  // (an empty file)
  auto* located = f.sliced ? &f.metadata : nullptr;  // slice offsets matter only when sliced
  auto slices = layout.optimizer_slices(model);
  f.tensors = checkpoint::optimizer_state(optimizer, slices, located);
  if (f.sliced) {  // only the slices that are this rank's to write (their state is "<slice>.<field>")
    std::set<std::string> skip;
    for (const auto& s : slices)
      if (!layout.writes_optimizer_slice(s.name)) skip.insert(s.name);
    if (!skip.empty()) {
      std::erase_if(f.tensors, [&](const auto& t) { return skip.count(t.first.substr(0, t.first.rfind('.'))) > 0; });
      for (const auto& name : skip) f.metadata.erase("offset." + name);
    }
  }
  for (auto& e : layout.external_optimizer_state(located)) f.tensors.push_back(std::move(e));
  return f;
}

void write_optimizer_files(const OptimizerFiles& f, const std::string& dir, int rank) {
  if (!f.writes) return;
  std::string path = f.sliced ? dir + "/optimizer/rank-" + std::to_string(rank) + ".safetensors"
                              : dir + "/optimizer.safetensors";
  checkpoint::save_safetensors(path, f.tensors, f.metadata);
}

void restore_optimizer_state(CheckpointLayout& layout, torch::optim::Optimizer& optimizer,
                             const torch::nn::Module& model, const std::string& dir) {
  checkpoint::OptimizerStateSource source(dir);
  checkpoint::load_optimizer_state(optimizer, layout.optimizer_slices(model), source);
  layout.load_external_optimizer_state(source);
}

// Everything one rank writes for a checkpoint, captured at save time.
struct Snapshot {
  std::string root, dir;
  int rank = 0, world = 1;
  int64_t step = 0;
  CheckpointOptions options;
  checkpoint::NamedTensors model;            // rank 0 only
  OptimizerFiles optimizer;
  std::string state_json;                     // rank 0 only
  at::Tensor rng;
  int64_t bytes() const {
    int64_t b = 0;
    for (const auto& l : {&model, &optimizer.tensors})
      for (const auto& [n, t] : *l) b += t.numel() * static_cast<int64_t>(t.element_size());
    return b;
  }
};

void write_rank_files(const Snapshot& s) {
  if (s.rank == 0) {
    checkpoint::save_model_state(s.model, s.dir + "/model", s.options.model);
    for (const auto& [name, bytes] : s.options.model_files) checkpoint::write_text_atomically(s.dir + "/model/" + name, bytes);
    checkpoint::write_text_atomically(s.dir + "/state.json", s.state_json);
  }
  write_optimizer_files(s.optimizer, s.dir, s.rank);
  checkpoint::save_safetensors(s.dir + "/rng/rank-" + std::to_string(s.rank) + ".safetensors",
                               {{"cpu", s.rng}});
}

// Rank 0, once every rank's files are complete: move `latest`, prune old checkpoints.
void publish(const Snapshot& s) {
  checkpoint::write_text_atomically(s.root + "/latest", "step-" + std::to_string(s.step) + "\n");
  if (s.options.keep_last > 0) {
    auto all = step_dirs(s.root);
    for (size_t i = 0; i + s.options.keep_last < all.size(); ++i) {
      fs::remove_all(s.root + "/" + all[i].second);
    }
  }
}

}  // namespace

Booster::~Booster() {
  try {
    wait_for_checkpoint();
  } catch (const std::exception& e) {
    COLOSSAL_LOG_ERROR("[checkpoint] asynchronous save failed: ", error_text(e));
  }
}

void Booster::wait_for_checkpoint() {
  if (!pending_save_) return;
  auto pending = std::move(pending_save_);
  pending->thread.join();
  if (pending->error) std::rethrow_exception(pending->error);
}

void CheckpointOptions::validate() const {
  COLOSSAL_CHECK(keep_last >= 0, "[checkpoint] keep_last: expected >= 0 (0 keeps every checkpoint), got ", keep_last);
  model.validate();
  for (const auto& [name, bytes] : model_files) {
    COLOSSAL_CHECK(!name.empty() && name.find('/') == std::string::npos && name != "." && name != ".." &&
                       name.rfind("model", 0) != 0,
                   "[checkpoint] model_files: '", name, "' must be a plain file name not starting with 'model'");
  }
}

void Booster::save_checkpoint(Boosted& boosted, const std::string& root, const TrainingState& state,
                              const CheckpointOptions& options) {
  options.validate();
  wait_for_checkpoint();  // at most one snapshot in memory
  auto& layout = boosted.optimizer->model_wrapper().checkpoint();
  auto s = std::make_shared<Snapshot>();
  s->root = root;
  s->dir = root + "/step-" + std::to_string(state.step);
  s->rank = my_rank();
  s->world = world();
  s->step = state.step;
  s->options = options;
  // Every rank creates the directories it writes into (mkdir of an existing one is harmless).
  fs::make_dirs(s->dir + "/rng");  // the root and the step directory too
  if (layout.optimizer_sharded()) fs::make_dirs(s->dir + "/optimizer");
  auto copy = [&](const checkpoint::NamedTensors& in) {
    if (!options.async) return in;  // written before training goes on: no copy needed
    checkpoint::NamedTensors out;
    for (const auto& [n, t] : in) out.emplace_back(n, t.detach().clone());
    return out;
  };
  // Collective under some plugins (sharded parameters are gathered): every rank calls it.
  auto params = layout.model_state_to_save(*boosted.model, options.trainable_only);
  s->optimizer = collect_optimizer_state(layout, boosted.optimizer->inner(), *boosted.model, plugin_->name());
  s->optimizer.tensors = copy(s->optimizer.tensors);
  if (s->rank == 0) {
    // The model is always saved whole (Hugging Face layout), once.
    s->model = copy(params);
    nlohmann::json js;
    js["step"] = state.step;
    js["epoch"] = state.epoch;
    if (state.global_batch > 0) js["global_batch"] = state.global_batch;
    if (state.replicas > 0) js["replicas"] = state.replicas;
    js["plugin"] = plugin_->name();
    js["world_size"] = s->world;
    if (options.trainable_only) js["model_contents"] = "trainable";
    if (boosted.lr_scheduler) js["lr_scheduler_step"] = boosted.lr_scheduler->last_step();
    js["plugin_state"] = boosted.optimizer->model_wrapper().hooks().extra_state();
    if (boosted.sampler) js["sampler"] = boosted.sampler->state_dict();
    s->state_json = js.dump(2) + "\n";
  }
  {
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    s->rng = gen.get_state();
  }

  if (!options.async) {
    barrier();  // the directories exist everywhere
    write_rank_files(*s);
    if (options.write_rank_state) options.write_rank_state(s->dir);
    barrier();  // every rank's files are complete
    if (s->rank == 0) publish(*s);
    barrier();
    return;
  }

  // Asynchronous: ranks count their completed writes in the store; rank 0 publishes when all
  // have. No collective runs on the background thread (it would race the training's).
  if (options.write_rank_state) {  // live state: written before training goes on
    barrier();  // the directories exist everywhere
    options.write_rank_state(s->dir);
  }
  last_snapshot_bytes_ = s->bytes();
  c10::intrusive_ptr<c10d::Store> store = distributed() ? dist::store() : nullptr;
  std::string key = "colossal/checkpoint/" + root + "/" + std::to_string(state.step);
  auto timeout = std::chrono::seconds(600);
  pending_save_ = std::make_unique<PendingSave>();
  auto* pending = pending_save_.get();
  pending->thread = std::thread([s, store, key, timeout, pending] {
    try {
      write_rank_files(*s);
      if (store) store->add(key, 1);
      if (s->rank != 0) return;
      auto deadline = std::chrono::steady_clock::now() + timeout;
      while (store && store->add(key, 0) < s->world) {
        COLOSSAL_CHECK(std::chrono::steady_clock::now() < deadline, "[checkpoint] asynchronous save of '",
                       s->dir, "': only ", store->add(key, 0), " of ", s->world,
                       " ranks finished writing; `latest` stays on the previous checkpoint");
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      publish(*s);
    } catch (...) {
      pending->error = std::current_exception();
    }
  });
}

void Booster::save_model(BoostedOptimizer& optimizer, const torch::nn::Module& model,
                         const std::string& dir, const checkpoint::SaveModelOptions& options) {
  auto state = optimizer.model_wrapper().checkpoint().model_state_to_save(model);
  // Every rank takes part (sharded plugins gather the parameters); rank 0 writes.
  if (my_rank() == 0) checkpoint::save_model_state(state, dir, options);
  barrier();
}

void Booster::save_optimizer(BoostedOptimizer& optimizer, const torch::nn::Module& model,
                             const std::string& dir) {
  auto& layout = optimizer.model_wrapper().checkpoint();
  bool sliced = layout.optimizer_sharded();
  if (my_rank() == 0) {
    fs::make_dirs(dir);
    // Stale state of an earlier save (perhaps by more ranks) would mix into this one.
    for (const char* stale : {"/optimizer", "/optimizer.safetensors", "/optimizer.safetensors.index.json"})
      fs::remove_all(dir + stale);
    if (sliced) fs::make_dirs(dir + "/optimizer");
  }
  barrier();
  write_optimizer_files(collect_optimizer_state(layout, optimizer.inner(), model, plugin_->name()), dir,
                        my_rank());
  barrier();
}

void Booster::load_optimizer(BoostedOptimizer& optimizer, const torch::nn::Module& model,
                             const std::string& dir) {
  restore_optimizer_state(optimizer.model_wrapper().checkpoint(), optimizer.inner(), model, dir);
}

checkpoint::LoadReport Booster::load_model(BoostedOptimizer& optimizer, torch::nn::Module& model,
                                           const std::string& dir,
                                           const checkpoint::LoadModelOptions& options) {
  auto& layout = optimizer.model_wrapper().checkpoint();
  auto report =
      checkpoint::load_state_into(layout.full_model_state(model), dir, options, layout.state_held_elsewhere());
  layout.after_model_load();
  return report;
}

namespace {
// The step directory <root>/latest names ("step-N", whitespace trimmed); "" without the file.
std::string latest_step_dir(const std::string& root) {
  struct stat st {};
  if (::stat((root + "/latest").c_str(), &st) != 0) return "";
  std::string latest = read_text(root + "/latest");
  latest.erase(latest.find_last_not_of(" \n\r\t") + 1);
  return latest.empty() ? "" : root + "/" + latest;
}
}  // namespace

std::optional<std::string> Booster::latest_checkpoint(const std::string& root) {
  if (root.empty()) return std::nullopt;
  const std::string dir = latest_step_dir(root);
  struct stat st {};
  if (dir.empty() || !fs::is_directory(dir + "/model") || ::stat((dir + "/state.json").c_str(), &st) != 0) return std::nullopt;
  return dir;
}

std::string Booster::step_directory(const std::string& root) {
  COLOSSAL_CHECK(fs::is_directory(root), "[checkpoint] no checkpoint at '", root,
                 "' (expected a checkpoint root with a 'latest' file, or one of its step-N directories)");
  if (fs::is_directory(root + "/model")) return root;
  const std::string dir = latest_step_dir(root);
  COLOSSAL_CHECK(!dir.empty(), "[checkpoint] '", root,
                 "' is neither a checkpoint root (no 'latest' file) nor a step directory (no 'model/')");
  return dir;
}

namespace {
nlohmann::json read_state_json(const std::string& dir) {
  auto js = nlohmann::json::parse(read_text(dir + "/state.json"), nullptr, false);
  COLOSSAL_CHECK(!js.is_discarded() && js.is_object(), "[checkpoint] '", dir, "/state.json' is not valid JSON");
  return js;
}
TrainingState training_state_of(const nlohmann::json& js) {
  TrainingState state;
  state.step = js.value("step", int64_t{0});
  state.epoch = js.value("epoch", int64_t{0});
  state.global_batch = js.value("global_batch", int64_t{0});
  state.replicas = js.value("replicas", int64_t{0});
  return state;
}
}  // namespace

TrainingState Booster::read_training_state(const std::string& root) {
  return training_state_of(read_state_json(step_directory(root)));
}

TrainingState Booster::load_checkpoint(Boosted& boosted, const std::string& root) {
  const std::string dir = step_directory(root);
  const auto js = read_state_json(dir);
  auto& layout = boosted.optimizer->model_wrapper().checkpoint();
  // A LoRA run's checkpoint holds what trains; the frozen rest is already in the model.
  auto params = layout.full_model_state(*boosted.model, js.value("model_contents", std::string("full")) == "trainable");
  auto report = checkpoint::load_state_into(params, dir + "/model", {}, layout.state_held_elsewhere());
  layout.after_model_load();
  restore_optimizer_state(layout, boosted.optimizer->inner(), *boosted.model, dir);

  const TrainingState state = training_state_of(js);
  if (boosted.lr_scheduler && js.contains("lr_scheduler_step")) {
    boosted.lr_scheduler->set_step(js["lr_scheduler_step"].get<int64_t>());
  }
  if (js.contains("plugin_state")) {
    boosted.optimizer->model_wrapper().hooks().load_extra_state(js["plugin_state"].get<std::map<std::string, double>>());
  }
  int saved_world = js.value("world_size", 1);
  if (boosted.sampler && js.contains("sampler")) {
    auto s = js["sampler"].get<std::map<std::string, int64_t>>();
    boosted.sampler->load_state_dict(s);  // maps the position onto this run's ranks
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
