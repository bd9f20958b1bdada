#include "core/checkpoint/optimizer_io.h"

#include <sys/stat.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <torch/torch.h>

#include <map>

#include "core/common/check.h"
#include "core/common/fs.h"

namespace colossal::checkpoint {
namespace {

at::Tensor step_tensor(int64_t step) { return torch::tensor({step}, torch::kInt64); }

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

NamedTensors optimizer_state(const torch::optim::Optimizer& optimizer,
                             const std::vector<OptimizerSlice>& slices,
                             std::map<std::string, std::string>* metadata) {
  std::map<const void*, const OptimizerSlice*> slice_of;
  for (const auto& s : slices) slice_of[s.tensor.unsafeGetTensorImpl()] = &s;
  NamedTensors out;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      auto it = optimizer.state().find(p.unsafeGetTensorImpl());
      if (it == optimizer.state().end()) continue;
      auto n = slice_of.find(p.unsafeGetTensorImpl());
      COLOSSAL_CHECK(n != slice_of.end(), "[checkpoint] the optimizer holds a tensor that is not a ",
                     "named parameter of the model");
      const std::string& name = n->second->name;
      if (metadata) (*metadata)["offset." + name] = std::to_string(n->second->offset);
      auto* state = it->second.get();
      if (auto* s = dynamic_cast<torch::optim::AdamWParamState*>(state)) {
        out.emplace_back(name + ".exp_avg", s->exp_avg());
        out.emplace_back(name + ".exp_avg_sq", s->exp_avg_sq());
        out.emplace_back(name + ".step", step_tensor(s->step()));
      } else if (auto* a = dynamic_cast<torch::optim::AdamParamState*>(state)) {
        out.emplace_back(name + ".exp_avg", a->exp_avg());
        out.emplace_back(name + ".exp_avg_sq", a->exp_avg_sq());
        out.emplace_back(name + ".step", step_tensor(a->step()));
      } else if (auto* g = dynamic_cast<torch::optim::SGDParamState*>(state)) {
        if (g->momentum_buffer().defined()) out.emplace_back(name + ".momentum_buffer", g->momentum_buffer());
      } else {
        COLOSSAL_FAIL("[checkpoint] optimizer state of '", name, "' has a type this version ",
                      "cannot save (supported: Adam, AdamW, FusedAdamW, SGD)");
      }
    }
  }
  return out;
}

OptimizerStateSource::OptimizerStateSource(const std::string& dir) : dir_(dir) {
  if (exists(dir + "/optimizer.safetensors") || exists(dir + "/optimizer.safetensors.index.json")) {
    layout_ = "replicated";
    replicated_ = std::make_shared<CheckpointReader>(dir, "optimizer");
    for (const auto& name : replicated_->names()) {
      int64_t numel = 1;
      for (auto d : replicated_->info(name).shape) numel *= d;
      pieces_[name].push_back(Piece{nullptr, name, 0, numel});
    }
    return;
  }
  std::string sub = dir + "/optimizer";
  std::vector<std::string> files;
  for (const auto& n : fs::list_dir(sub))
    if (n.rfind("rank-", 0) == 0 && n.size() > 17 && n.substr(n.size() - 12) == ".safetensors")
      files.push_back(sub + "/" + n);
  COLOSSAL_CHECK(!files.empty(), "[checkpoint] '", dir, "' has no optimizer state (expected ",
                 "optimizer.safetensors or optimizer/rank-R.safetensors)");
  layout_ = "sliced";
  int64_t expected = -1;
  std::vector<bool> seen;
  for (const auto& path : files) {
    auto file = SafetensorsFile::open(path);
    const auto& meta = file->metadata();
    auto ws = meta.find("world_size");
    auto rk = meta.find("rank");
    COLOSSAL_CHECK(ws != meta.end() && rk != meta.end(), "[checkpoint] '", path,
                   "': metadata lacks 'world_size' or 'rank'");
    int64_t w = std::stoll(ws->second), r = std::stoll(rk->second);
    if (expected < 0) {
      expected = w;
      seen.assign(w, false);
    }
    COLOSSAL_CHECK(w == expected && r >= 0 && r < w, "[checkpoint] '", path, "': world_size ", w,
                   " rank ", r, " does not fit the other rank files (world_size ", expected, ")");
    seen[r] = true;
    for (const auto& info : file->tensors()) {
      const std::string& key = info.name;
      auto dot = key.rfind('.');
      std::string param = dot == std::string::npos ? key : key.substr(0, dot);
      int64_t offset = 0;
      auto off = meta.find("offset." + param);
      if (off != meta.end()) offset = std::stoll(off->second);
      int64_t numel = 1;
      for (auto d : info.shape) numel *= d;
      pieces_[key].push_back(Piece{file, key, offset, numel});
    }
  }
  for (int64_t r = 0; r < expected; ++r)
    COLOSSAL_CHECK(seen[r], "[checkpoint] '", sub, "' lacks rank-", r, ".safetensors (saved by ",
                   expected, " ranks)");
}

at::Tensor OptimizerStateSource::read_range(const std::string& key, int64_t offset, int64_t numel) const {
  auto it = pieces_.find(key);
  COLOSSAL_CHECK(it != pieces_.end(), "[checkpoint] optimizer state in '", dir_, "' lacks '", key, "'");
  at::Tensor out;
  int64_t covered = 0;
  for (const auto& piece : it->second) {
    int64_t lo = std::max(offset, piece.offset);
    int64_t hi = std::min(offset + numel, piece.offset + piece.numel);
    if (lo >= hi) continue;
    auto src = (piece.file ? piece.file->view(piece.tensor) : replicated_->view(piece.tensor)).reshape({-1});
    if (!out.defined()) out = torch::zeros({numel}, src.options());
    out.narrow(0, lo - offset, hi - lo).copy_(src.narrow(0, lo - piece.offset, hi - lo));
    covered += hi - lo;
  }
  COLOSSAL_CHECK(covered == numel, "[checkpoint] optimizer state '", key, "' in '", dir_,
                 "': the saved pieces cover ", covered, " of elements [", offset, ", ",
                 offset + numel, ")");
  return out;
}

int64_t OptimizerStateSource::saved_numel(const std::string& key) const {
  int64_t extent = 0;
  auto it = pieces_.find(key);
  if (it != pieces_.end())
    for (const auto& piece : it->second) extent = std::max(extent, piece.offset + piece.numel);
  return extent;
}

at::Tensor OptimizerStateSource::read_scalar(const std::string& key) const {
  auto it = pieces_.find(key);
  COLOSSAL_CHECK(it != pieces_.end() && !it->second.empty(), "[checkpoint] optimizer state in '",
                 dir_, "' lacks '", key, "'");
  const auto& piece = it->second.front();
  return (piece.file ? piece.file->view(piece.tensor) : replicated_->view(piece.tensor)).clone();
}

void load_optimizer_state(torch::optim::Optimizer& optimizer,
                          const std::vector<OptimizerSlice>& slices,
                          const OptimizerStateSource& source) {
  std::map<const void*, const OptimizerSlice*> slice_of;
  for (const auto& s : slices) slice_of[s.tensor.unsafeGetTensorImpl()] = &s;
  torch::NoGradGuard no_grad;
  bool is_adamw = dynamic_cast<torch::optim::AdamW*>(&optimizer) != nullptr ||
                  dynamic_cast<torch::optim::AdamWOptions*>(&optimizer.defaults()) != nullptr;
  bool is_adam = dynamic_cast<torch::optim::Adam*>(&optimizer) != nullptr;
  bool is_sgd = dynamic_cast<torch::optim::SGD*>(&optimizer) != nullptr;
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      auto n = slice_of.find(p.unsafeGetTensorImpl());
      COLOSSAL_CHECK(n != slice_of.end(), "[checkpoint] the optimizer holds an unnamed tensor");
      const OptimizerSlice& slice = *n->second;
      const std::string& name = slice.name;
      if (!source.contains(name + ".exp_avg") && !source.contains(name + ".momentum_buffer")) {
        continue;  // this parameter had no state yet (never stepped)
      }
      auto range = [&](const std::string& suffix) {
        int64_t full = slice.full_numel < 0 ? p.numel() : slice.full_numel;
        int64_t saved = source.saved_numel(name + suffix);
        COLOSSAL_CHECK(saved == full, "[checkpoint] optimizer state '", name, suffix, "' was saved for ",
                       saved, " elements; the parameter has ", full);
        return source.read_range(name + suffix, slice.offset, p.numel()).view(p.sizes()).to(p.dtype());
      };
      auto key = p.unsafeGetTensorImpl();
      if (is_adamw || is_adam) {
        auto m = range(".exp_avg"), v = range(".exp_avg_sq");
        int64_t step = source.read_scalar(name + ".step").item<int64_t>();
        if (is_adamw) {
          auto s = std::make_unique<torch::optim::AdamWParamState>();
          s->exp_avg(m);
          s->exp_avg_sq(v);
          s->step(step);
          optimizer.state()[key] = std::move(s);
        } else {
          auto s = std::make_unique<torch::optim::AdamParamState>();
          s->exp_avg(m);
          s->exp_avg_sq(v);
          s->step(step);
          optimizer.state()[key] = std::move(s);
        }
      } else if (is_sgd) {
        auto s = std::make_unique<torch::optim::SGDParamState>();
        s->momentum_buffer(range(".momentum_buffer"));
        optimizer.state()[key] = std::move(s);
      } else {
        COLOSSAL_FAIL("[checkpoint] cannot restore state into this optimizer type");
      }
    }
  }
}

}  // namespace colossal::checkpoint
