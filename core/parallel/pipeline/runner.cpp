#include "core/parallel/pipeline/runner.h"

#include <torch/autograd.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <array>
#include <map>

#include "core/common/check.h"
#include "core/dist/collectives.h"
#include "core/nn/weight_gradient_store.h"

namespace colossal::parallel::pipeline {
namespace {

using Key = std::pair<int, int>;  // (microbatch, chunk or virtual stage)

// A microbatch's activations on one model chunk, held from its F to its last backward step.
// Under split backward, B frees the graph and leaves what W needs: the weight-gradient store's
// entries (deferred dW GEMMs and gradients already computed).
struct Held {
  torch::Tensor input, output, grad_output;
  std::vector<nn::WeightGradientStore::Entry> weight_work;
};

torch::Tensor take(std::map<Key, torch::Tensor>& from, const Key& key) {
  auto it = from.find(key);
  COLOSSAL_CHECK(it != from.end(), "[pipeline] internal: no local hand-off for microbatch ", key.first,
                 ", virtual stage ", key.second);
  auto t = std::move(it->second);
  from.erase(it);
  return t;
}

// Activations moving forward to the next virtual stage: over the link, or handed over within this
// rank (zbv's turn of the V).
struct ForwardPath {
  const Schedule& schedule;
  StageLink& link;
  int rank;
  std::map<Key, torch::Tensor> local;  // by (microbatch, receiving stage)

  torch::Tensor receive(int mb, int v) {
    const int from = schedule.rank_of(v - 1);
    return from == rank ? take(local, {mb, v}) : link.recv(from, {v, Direction::kForward, mb});
  }
  void pass(const torch::Tensor& out, int mb, int v) {  // `v` produced it
    const int to = schedule.rank_of(v + 1);
    if (to == rank) local[{mb, v + 1}] = out.detach();
    else link.send(out, to, {v + 1, Direction::kForward, mb});
  }
};

std::vector<torch::Tensor> grad_outputs(const Held& h) {
  if (!h.grad_output.defined()) return {};
  return {h.grad_output};
}

// Parameters by identity (the same tensor may sit in two chunks: zbv's tied embeddings).
using ParamKey = const c10::TensorImpl*;

// B of a split backward: the chunk input's gradient, and every parameter gradient the graph
// gives directly (norms, embeddings: not deferred by the linears) kept for W. Nothing is
// accumulated, so no gradient hook fires during B.
torch::Tensor backward_input(Held& h, const std::vector<torch::Tensor>& params, nn::WeightGradientStore& store) {
  std::vector<torch::Tensor> wrt;
  const bool want_input = h.input.requires_grad();
  if (want_input) wrt.push_back(h.input);
  for (const auto& p : params) wrt.push_back(p);
  auto got = torch::autograd::grad({h.output}, wrt, grad_outputs(h), /*retain_graph=*/false,
                                   /*create_graph=*/false, /*allow_unused=*/true);
  h.output = torch::Tensor();  // the graph is gone; W needs only the store's entries
  h.grad_output = torch::Tensor();
  h.weight_work = store.take();
  for (size_t i = want_input ? 1 : 0; i < wrt.size(); ++i)
    if (got[i].defined()) h.weight_work.push_back({wrt[i], [g = got[i]] { return g; }});
  return want_input ? got[0] : torch::Tensor();
}

// W: each parameter's share summed, then accumulated. Where this is the parameter's last
// gradient of the step it goes through autograd's accumulator, so data-parallel hooks see it
// (sync is on for this step); an earlier share is added in place, hook-free, so no hook takes a
// gradient that is not yet whole.
void backward_weight(std::vector<nn::WeightGradientStore::Entry>& work, const std::map<ParamKey, int>& last_touch,
                     int index) {
  std::vector<torch::Tensor> params, grads;
  std::map<ParamKey, size_t> slot;
  for (auto& e : work) {
    auto g = e.gradient();
    auto [it, fresh] = slot.emplace(e.param.unsafeGetTensorImpl(), params.size());
    if (fresh) {
      params.push_back(e.param);
      grads.push_back(std::move(g));
    } else {
      grads[it->second] = grads[it->second] + g;
    }
  }
  work.clear();
  std::vector<torch::Tensor> final_params, final_grads;
  for (size_t i = 0; i < params.size(); ++i) {
    auto it = last_touch.find(params[i].unsafeGetTensorImpl());
    if (it == last_touch.end() || it->second == index) {
      final_params.push_back(params[i]);
      final_grads.push_back(grads[i]);
      continue;
    }
    torch::NoGradGuard no_grad;
    auto& acc = params[i].mutable_grad();
    const auto& g = grads[i];
    if (acc.defined()) acc.add_(g);
    else acc = g.is_view() || !g.is_contiguous() ? g.clone(at::MemoryFormat::Contiguous) : g;  // as the accumulator would
  }
  if (!final_params.empty()) torch::autograd::backward(final_params, final_grads);
}

}  // namespace

PipelineRunner::PipelineRunner(Schedule schedule, dist::Group group)
    : schedule_(std::move(schedule)), link_(std::move(group)), rank_(link_.group().rank()) {
  COLOSSAL_CHECK(link_.group().size() == schedule_.stages(), "[pipeline] the schedule has ", schedule_.stages(),
                 " stages but the pipeline group has ", link_.group().size(), " ranks");
}

double PipelineRunner::run(const StageFunctions& model, const std::vector<torch::Tensor>& inputs,
                           const std::vector<torch::Tensor>& targets) {
  const int V = schedule_.virtual_stages(), m = schedule_.microbatches();
  std::map<Key, Held> held;                          // by (microbatch, chunk)
  ForwardPath forward{schedule_, link_, rank_, {}};
  std::map<Key, torch::Tensor> local_bwd;  // gradients handed over within this rank, by (microbatch, stage)
  double loss_sum = 0;
  int live = 0;
  link_.new_step();
  peak_live_ = 0;
  timeline_.clear();
  // Split schedules defer every linear layer's weight gradient to its W step.
  const bool split = schedule_.splits_backward();
  nn::WeightGradientStore store;
  nn::DeferWeightGradients defer(split ? &store : nullptr);
  std::vector<std::vector<torch::Tensor>> chunk_params(schedule_.chunks());
  for (int c = 0; c < schedule_.chunks(); ++c)
    for (const auto& p : model.parameters(c))
      if (p.requires_grad()) chunk_params[c].push_back(p);
  // The step after which each chunk's parameters, and each parameter, have their whole gradient
  // (a parameter in two chunks: the later one's).
  const auto& steps = schedule_.steps(rank_);
  std::vector<int> last_gradient(schedule_.chunks(), -1);
  for (int i = 0; i < static_cast<int>(steps.size()); ++i)
    if (steps[i].work == Work::kBackward || steps[i].work == Work::kBackwardWeight) last_gradient[steps[i].chunk] = i;
  std::map<ParamKey, int> last_touch;
  for (int c = 0; c < schedule_.chunks(); ++c)
    for (const auto& p : chunk_params[c]) {
      int& t = last_touch.emplace(p.unsafeGetTensorImpl(), -1).first->second;
      t = std::max(t, last_gradient[c]);
    }
  std::vector<bool> completes(steps.size(), false);  // some parameter's gradient is whole after it
  for (const auto& [param, t] : last_touch)
    if (t >= 0) completes[t] = true;
  int index = -1;
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  for (const Step& st : steps) {
    ++index;
    const int v = schedule_.virtual_stage(rank_, st.chunk), mb = st.microbatch;
    const bool final_gradient = completes[index];
    if (final_gradient && model.gradient_sync) model.gradient_sync(true);
    const Key key{mb, st.chunk};
    StepRecord rec{st, seconds(), 0};
    switch (st.work) {
      case Work::kForward: {
        torch::Tensor in;
        if (v == 0) {
          COLOSSAL_CHECK(mb < static_cast<int>(inputs.size()), "[pipeline] the first stage has ", inputs.size(),
                         " microbatch inputs; the schedule runs ", m);
          in = inputs[mb];
        } else {
          in = forward.receive(mb, v).detach().requires_grad_(true);
        }
        rec.start_s = seconds();  // waiting for the input is idle time, not the step's
        auto out = model.forward(st.chunk, in);
        if (v == V - 1) {
          COLOSSAL_CHECK(mb < static_cast<int>(targets.size()), "[pipeline] the last stage has ", targets.size(),
                         " microbatch targets; the schedule runs ", m);
          out = model.loss(out, targets[mb]) / static_cast<double>(m);
          loss_sum += out.item<double>();
          if (model.loss_scale != 1.0) out = out * model.loss_scale;
        } else {
          forward.pass(out, mb, v);
        }
        held[key] = {in, out, {}, {}};
        peak_live_ = std::max(peak_live_, ++live);
        break;
      }
      case Work::kBackward:
      case Work::kBackwardInput: {
        auto it = held.find(key);
        COLOSSAL_CHECK(it != held.end(), "[pipeline] ", to_string(st), " before its forward");
        Held& h = it->second;
        if (v < V - 1) {
          const int from = schedule_.rank_of(v + 1);
          h.grad_output = from == rank_ ? take(local_bwd, {mb, v}) : link_.recv(from, {v, Direction::kBackward, mb});
        }
        rec.start_s = seconds();
        torch::Tensor grad_input;
        if (split) {
          grad_input = backward_input(h, chunk_params[st.chunk], store);
          if (st.work == Work::kBackward) backward_weight(h.weight_work, last_touch, index);  // no W of its own
        } else {
          torch::autograd::backward({h.output}, grad_outputs(h));
          if (v > 0) grad_input = h.input.grad();
        }
        if (st.work == Work::kBackward) {
          held.erase(it);
          --live;
        }
        if (v > 0) {
          const int to = schedule_.rank_of(v - 1);
          if (to == rank_) local_bwd[{mb, v - 1}] = grad_input;
          else link_.send(grad_input, to, {v - 1, Direction::kBackward, mb});
        }
        break;
      }
      case Work::kBackwardWeight: {
        auto it = held.find(key);
        COLOSSAL_CHECK(it != held.end(), "[pipeline] ", to_string(st), " before its forward");
        COLOSSAL_CHECK(!it->second.output.defined(), "[pipeline] ", to_string(st), " before its input-gradient step");
        backward_weight(it->second.weight_work, last_touch, index);
        held.erase(it);
        --live;
        break;
      }
    }
    if (final_gradient && model.gradient_sync) model.gradient_sync(false);
    rec.end_s = seconds();
    timeline_.push_back(rec);
  }
  link_.wait_sends();
  // The loss lives on the last virtual stage's rank; every rank returns it.
  auto loss = torch::tensor({loss_sum}, torch::kFloat64);
  dist::broadcast(loss, schedule_.rank_of(V - 1), link_.group());
  // The first step pays for allocations and warm caches: its costs mislead. Steps 2 and 3 are
  // averaged (one noisy step could pick the wrong order), then the order is re-planned once.
  if (split && ++runs_ >= 2 && runs_ <= 3) {
    for (const auto& r : timeline_) {
      cost_sum_[cost_index(r.step.work)] += r.end_s - r.start_s;
      cost_count_[cost_index(r.step.work)] += 1;
    }
    if (runs_ == 3) replan_from_measured_costs();
  }
  return loss.item<double>();
}

// The zero-bubble orders place deferred W steps where the bubbles are, and where they are depends
// on what F, B and W cost on each stage: unit costs put them in the wrong places when W is 0.8x
// F and stages differ. Once, after the third step, every rank shares its mean costs of steps 2-3
// and all build the same order from them (kept if the simulation on those costs says it is
// faster). Changing the order changes only the order in which microbatches' weight gradients are
// summed.
void PipelineRunner::replan_from_measured_costs() {
  const int p = schedule_.stages();
  auto all = torch::zeros({p * 3}, torch::kFloat64);
  for (int k = 0; k < 3; ++k)
    all[rank_ * 3 + k] = std::max(1e-6, cost_count_[k] > 0 ? cost_sum_[k] / cost_count_[k] : 1e-6);
  dist::all_reduce(all, link_.group());  // every rank writes its own slots: the sum gathers them
  auto options = schedule_.options();
  options.costs.clear();
  for (int r = 0; r < p; ++r)
    options.costs.push_back({all[r * 3].item<double>(), all[r * 3 + 1].item<double>(), all[r * 3 + 2].item<double>()});
  // The list scheduler is greedy: kept only where it beats the unit-cost order on these costs.
  Schedule planned(options);
  if (simulate(planned, options.costs).makespan < simulate(schedule_, options.costs).makespan) schedule_ = planned;
}

double PipelineRunner::evaluate(const StageFunctions& model, const std::vector<torch::Tensor>& inputs,
                                const std::vector<torch::Tensor>& targets) {
  torch::NoGradGuard no_grad;
  const int V = schedule_.virtual_stages();
  const int m = static_cast<int>(schedule_.rank_of(0) == rank_ ? inputs.size() : targets.size());
  // Every rank walks the same global order, (microbatch, virtual stage): each receive's send comes
  // earlier in it, so blocking receives cannot wait on each other.
  std::vector<int> chunks(schedule_.chunks());
  for (int c = 0; c < schedule_.chunks(); ++c) chunks[c] = c;
  std::sort(chunks.begin(), chunks.end(),
            [&](int a, int b) { return schedule_.virtual_stage(rank_, a) < schedule_.virtual_stage(rank_, b); });
  // The microbatch count travels with the data: only the ends know it.
  auto count = torch::tensor({static_cast<int64_t>(m)}, torch::kLong);
  dist::broadcast(count, schedule_.rank_of(0), link_.group());
  const int microbatches = static_cast<int>(count.item<int64_t>());
  ForwardPath forward{schedule_, link_, rank_, {}};
  double loss_sum = 0;
  link_.new_step();
  for (int mb = 0; mb < microbatches; ++mb)
    for (int c : chunks) {
      const int v = schedule_.virtual_stage(rank_, c);
      auto out = model.forward(c, v == 0 ? inputs.at(mb) : forward.receive(mb, v));
      if (v == V - 1) loss_sum += model.loss(out, targets.at(mb)).item<double>() / microbatches;
      else forward.pass(out, mb, v);
    }
  link_.wait_sends();
  auto loss = torch::tensor({loss_sum}, torch::kFloat64);
  dist::broadcast(loss, schedule_.rank_of(V - 1), link_.group());
  return loss.item<double>();
}

}  // namespace colossal::parallel::pipeline
