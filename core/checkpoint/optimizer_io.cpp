#include "core/checkpoint/optimizer_io.h"

#include <sys/stat.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>
#include <torch/torch.h>

#include <map>
#include <optional>
#include <sstream>

#include "core/common/check.h"
#include "core/common/fs.h"

namespace colossal::checkpoint {
namespace {

at::Tensor step_tensor(int64_t step) { return torch::tensor({step}, torch::kInt64); }

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// "tp.<param>" metadata: "<split_dim>:<split_start>:<split_size>:<d0>x<d1>x..." (the whole shape).
std::string encode_tp_part(const OptimizerSlice& s) {
  std::string shape;
  for (auto d : s.whole_shape) shape += (shape.empty() ? "" : "x") + std::to_string(d);
  return std::to_string(s.split_dim) + ":" + std::to_string(s.split_start) + ":" + std::to_string(s.split_size) + ":" + shape;
}

// "<base>@tp<R>of<T>" -> (base, R, T); nullopt for other names.
struct TpName {
  std::string base;
  int rank = 0, size = 1;
};
std::optional<TpName> parse_tp_name(const std::string& name) {
  const auto at = name.rfind("@tp");
  if (at == std::string::npos) return std::nullopt;
  const auto of = name.find("of", at + 3);
  if (of == std::string::npos) return std::nullopt;
  try {
    return TpName{name.substr(0, at), std::stoi(name.substr(at + 3, of - at - 3)), std::stoi(name.substr(of + 2))};
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

}  // namespace

std::string tensor_parallel_base(const std::string& name) {
  auto tp = parse_tp_name(name);
  return tp ? tp->base : name;
}

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
      if (metadata) {
        (*metadata)["offset." + name] = std::to_string(n->second->offset);
        if (!n->second->whole_shape.empty()) (*metadata)["tp." + name] = encode_tp_part(*n->second);
        if (const auto* sl = n->second; sl->split_dim2 >= 0)
          (*metadata)["tp2." + name] = std::to_string(sl->split_dim2) + ":" + std::to_string(sl->split_start2) + ":" +
                                       std::to_string(sl->split_size2);
      }
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
      // A tensor-parallel part: where it sits in the whole parameter.
      auto tp = parse_tp_name(param);
      auto geometry = meta.find("tp." + param);
      if (tp && geometry == meta.end()) unplaced_tp_.insert(tp->base);
      if (tp && geometry != meta.end() && !tp_parts_[tp->base].count(tp->rank)) {
        TpPart part;
        part.name = param;
        char sep = 0;
        std::istringstream in(geometry->second);
        std::string shape;
        in >> part.split_dim >> sep >> part.split_start >> sep >> part.split_size >> sep >> shape;
        for (size_t at = 0; at < shape.size();) {
          const auto x = shape.find('x', at);
          part.whole_shape.push_back(std::stoll(shape.substr(at, x == std::string::npos ? std::string::npos : x - at)));
          at = x == std::string::npos ? shape.size() : x + 1;
        }
        if (auto second = meta.find("tp2." + param); second != meta.end()) {
          std::istringstream in2(second->second);
          in2 >> part.split_dim2 >> sep >> part.split_start2 >> sep >> part.split_size2;
        }
        tp_parts_[tp->base][tp->rank] = std::move(part);
        tp_size_[tp->base] = tp->size;
      }
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

bool OptimizerStateSource::holds(const std::string& base) const {
  return contains(base + ".exp_avg") || contains(base + ".momentum_buffer") || tp_parts_.count(base) > 0;
}

at::Tensor OptimizerStateSource::read_whole(const std::string& base, const std::string& suffix,
                                            const std::vector<int64_t>& shape) const {
  if (contains(base + suffix)) return read_range(base + suffix, 0, saved_numel(base + suffix)).view(shape);
  auto it = tp_parts_.find(base);
  COLOSSAL_CHECK(it != tp_parts_.end(), "[checkpoint] optimizer state in '", dir_, "' lacks '", base, suffix, "'");
  const int tp = tp_size_.at(base);
  const auto& parts = it->second;
  for (int r = 0; r < tp; ++r)
    COLOSSAL_CHECK(parts.count(r), "[checkpoint] optimizer state of '", base, "' in '", dir_, "' was saved by ", tp,
                   " tensor-parallel ranks; the part of rank ", r, " is missing");
  const auto& first = parts.begin()->second;
  auto read_part = [&](const TpPart& p) {
    const std::string key = p.name + suffix;
    return read_range(key, 0, saved_numel(key));
  };
  if (first.split_dim < 0) return read_part(first).view(first.whole_shape);  // every rank held it whole
  const int dim = first.split_dim;
  at::Tensor whole, covered;  // covered: which elements some part gave (grids hold blocks more than once)
  for (const auto& [r, p] : parts) {
    if (p.split_size == 0) continue;  // only padding rows
    auto flat = read_part(p);
    if (!whole.defined()) {
      whole = torch::zeros(p.whole_shape, flat.options());
      covered = torch::zeros(p.whole_shape, torch::kBool);
    }
    // The part as saved: the whole shape with its rows along `dim` (real ones, then padding) and,
    // on a grid, its block of dim2.
    auto shape = p.whole_shape;
    if (p.split_dim2 >= 0) shape[p.split_dim2] = p.split_size2;
    int64_t other = 1;
    for (size_t d = 0; d < shape.size(); ++d)
      if (static_cast<int>(d) != dim) other *= shape[d];
    shape[dim] = flat.numel() / std::max<int64_t>(other, 1);
    COLOSSAL_CHECK(shape[dim] * other == flat.numel() && shape[dim] >= p.split_size, "[checkpoint] optimizer state '",
                   p.name, suffix, "' in '", dir_, "' does not fit its recorded place in the whole parameter");
    auto target = whole.narrow(dim, p.split_start, p.split_size);
    auto mark = covered.narrow(dim, p.split_start, p.split_size);
    if (p.split_dim2 >= 0) {
      target = target.narrow(p.split_dim2, p.split_start2, p.split_size2);
      mark = mark.narrow(p.split_dim2, p.split_start2, p.split_size2);
    }
    target.copy_(flat.view(shape).narrow(dim, 0, p.split_size));
    mark.fill_(true);
  }
  const int64_t have = covered.sum().item<int64_t>();
  COLOSSAL_CHECK(have == covered.numel(), "[checkpoint] optimizer state of '", base, "' in '", dir_,
                 "': the tensor-parallel parts cover ", have, " of ", covered.numel(), " elements");
  return whole;
}

at::Tensor OptimizerStateSource::read_step(const std::string& base) const {
  if (contains(base + ".step")) return read_scalar(base + ".step");
  auto it = tp_parts_.find(base);
  COLOSSAL_CHECK(it != tp_parts_.end(), "[checkpoint] optimizer state in '", dir_, "' lacks '", base, ".step'");
  return read_scalar(it->second.begin()->second.name + ".step");
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
  int64_t restored = 0, parameters = 0;
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      auto n = slice_of.find(p.unsafeGetTensorImpl());
      COLOSSAL_CHECK(n != slice_of.end(), "[checkpoint] the optimizer holds an unnamed tensor");
      ++parameters;
      const OptimizerSlice& slice = *n->second;
      const std::string& name = slice.name;
      // Saved under the same name (the same tp size, or none), or else as the whole parameter
      // or its tensor-parallel parts at another tp size.
      const bool same_name = source.contains(name + ".exp_avg") || source.contains(name + ".momentum_buffer");
      const std::string base = tensor_parallel_base(name);
      COLOSSAL_CHECK(same_name || !source.saved_without_placement(base), "[checkpoint] optimizer state of '", base,
                     "' was saved at another tensor-parallel size by a version that did not record where each ",
                     "rank's part sits; resume at the tp size it was saved with");
      if (!same_name && !source.holds(base)) continue;  // this parameter had no state yet (never stepped)
      ++restored;
      const int64_t full = slice.full_numel < 0 ? p.numel() : slice.full_numel;
      auto range = [&](const std::string& suffix) {
        if (same_name) {
          int64_t saved = source.saved_numel(name + suffix);
          COLOSSAL_CHECK(saved == full, "[checkpoint] optimizer state '", name, suffix, "' was saved for ",
                         saved, " elements; the parameter has ", full);
          return source.read_range(name + suffix, slice.offset, p.numel()).view(p.sizes()).to(p.dtype());
        }
        // This rank's part of the whole state (zeros in its padding rows), flattened, then its
        // ZeRO slice.
        auto whole = source.read_whole(base, suffix, slice.whole_shape.empty() ? p.sizes().vec() : slice.whole_shape);
        // (A part past the end of a padded vocabulary holds only padding rows.)
        auto part = slice.split_dim < 0 ? whole
                    : slice.split_size == 0 ? whole.narrow(slice.split_dim, 0, 0)
                                            : whole.narrow(slice.split_dim, slice.split_start, slice.split_size);
        if (slice.split_dim2 >= 0) part = part.narrow(slice.split_dim2, slice.split_start2, slice.split_size2);
        auto flat = part.contiguous().reshape({-1});
        COLOSSAL_CHECK(flat.numel() <= full, "[checkpoint] optimizer state '", base, suffix, "' gives ", flat.numel(),
                       " elements to '", name, "', which has ", full);
        if (flat.numel() < full) flat = torch::cat({flat, torch::zeros({full - flat.numel()}, flat.options())});
        return flat.narrow(0, slice.offset, p.numel()).view(p.sizes()).to(p.dtype());
      };
      auto key = p.unsafeGetTensorImpl();
      if (is_adamw || is_adam) {
        auto m = range(".exp_avg"), v = range(".exp_avg_sq");
        int64_t step = (same_name ? source.read_scalar(name + ".step") : source.read_step(base)).item<int64_t>();
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
