#include "core/parallel/pipeline/runner.h"

#include <torch/autograd.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "core/common/check.h"
#include "core/dist/collectives.h"

namespace colossal::parallel::pipeline {
namespace {

using Key = std::pair<int, int>;  // (microbatch, chunk or virtual stage)

// A microbatch's activations on one model chunk, held from its F to its last backward step.
struct Held {
  torch::Tensor input, output, grad_output;
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
  // The step after which each chunk's parameters have their whole gradient.
  const auto& steps = schedule_.steps(rank_);
  std::vector<int> last_gradient(schedule_.chunks(), -1);
  for (int i = 0; i < static_cast<int>(steps.size()); ++i)
    if (steps[i].work == Work::kBackward || steps[i].work == Work::kBackwardWeight) last_gradient[steps[i].chunk] = i;
  int index = -1;
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  for (const Step& st : steps) {
    ++index;
    const int v = schedule_.virtual_stage(rank_, st.chunk), mb = st.microbatch;
    const bool final_gradient = index == last_gradient[st.chunk];
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
        held[key] = {in, out, {}};
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
        if (st.work == Work::kBackward) {
          torch::autograd::backward({h.output}, grad_outputs(h));
          if (v > 0) grad_input = h.input.grad();
          held.erase(it);
          --live;
        } else if (v > 0) {  // the input's gradient only; W follows from the same graph
          grad_input = torch::autograd::grad({h.output}, {h.input}, grad_outputs(h), /*retain_graph=*/true)[0];
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
        std::vector<torch::Tensor> params;
        for (const auto& p : model.parameters(st.chunk))
          if (p.requires_grad()) params.push_back(p);
        if (!params.empty())
          torch::autograd::backward({it->second.output}, grad_outputs(it->second), /*retain_graph=*/false,
                                    /*create_graph=*/false, params);
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
  return loss.item<double>();
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
