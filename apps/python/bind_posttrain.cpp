// colossal._C.posttrain: the preference and GRPO losses train_llama uses, on tensors a caller
// brings (log-probabilities from any model): for checking against TRL's, and for Python loops.
#include <torch/csrc/utils/pybind.h>

#include "apps/python/bindings.h"
#include "core/posttrain/grpo_loss.h"
#include "core/posttrain/preference_loss.h"

namespace colossal::python {
namespace py = pybind11;

void bind_posttrain(py::module_& m) {
  auto p = m.def_submodule("posttrain", "preference losses (DPO, IPO, SimPO, ORPO), the reward model's, GRPO's");
  p.def(
      "preference_loss",
      [](const torch::Tensor& chosen, const torch::Tensor& rejected, const std::optional<torch::Tensor>& chosen_tokens,
         const std::optional<torch::Tensor>& rejected_tokens, const std::optional<torch::Tensor>& reference_chosen,
         const std::optional<torch::Tensor>& reference_rejected, const std::string& loss_type, double beta,
         double label_smoothing, double simpo_gamma) {
        posttrain::PairLogProbs pairs{chosen, rejected, chosen_tokens.value_or(torch::Tensor()),
                                      rejected_tokens.value_or(torch::Tensor()),
                                      reference_chosen.value_or(torch::Tensor()),
                                      reference_rejected.value_or(torch::Tensor())};
        const auto out = posttrain::preference_loss(
            pairs, {.loss_type = loss_type, .beta = beta, .label_smoothing = label_smoothing, .simpo_gamma = simpo_gamma});
        return py::make_tuple(out.loss, out.chosen_rewards, out.rejected_rewards);
      },
      py::arg("chosen"), py::arg("rejected"), py::arg("chosen_tokens") = py::none(),
      py::arg("rejected_tokens") = py::none(), py::arg("reference_chosen") = py::none(),
      py::arg("reference_rejected") = py::none(), py::arg("loss_type") = "sigmoid", py::arg("beta") = 0.1,
      py::arg("label_smoothing") = 0.0, py::arg("simpo_gamma") = 0.5,
      "(loss, chosen_rewards, rejected_rewards) from the answers' summed log-probabilities [B] (and token counts for "
      "ipo, simpo, orpo; the reference model's sums for sigmoid, ipo)");
  p.def("pairwise_reward_loss", &posttrain::pairwise_reward_loss, py::arg("chosen_scores"), py::arg("rejected_scores"),
        "mean -log sigmoid(chosen - rejected)");
  p.def("group_advantages", &posttrain::group_advantages, py::arg("rewards"), py::arg("group"),
        py::arg("scale_rewards") = true, "GRPO's advantages [N x G] (float64) for rewards in groups of G");
  p.def("groups_with_signal", &posttrain::groups_with_signal, py::arg("rewards"), py::arg("group"),
        "[N x G] bool: completions of groups whose rewards are not all equal");
  p.def(
      "grpo_loss",
      [](const torch::Tensor& logps, const torch::Tensor& mask, const torch::Tensor& advantages,
         const std::optional<torch::Tensor>& old_logps, const std::optional<torch::Tensor>& ref_logps,
         double epsilon, double epsilon_high, double beta, const std::string& loss_type, double tokens) {
        posttrain::GrpoOptions o;
        o.epsilon = epsilon;
        o.epsilon_high = epsilon_high;
        o.beta = beta;
        o.loss_type = loss_type;
        o.validate();
        const auto out = posttrain::grpo_loss({logps, old_logps.value_or(torch::Tensor()),
                                               ref_logps.value_or(torch::Tensor()), mask, advantages, tokens}, o);
        return py::make_tuple(out.loss, out.clipped_low, out.clipped_high, out.kl);
      },
      py::arg("logps"), py::arg("mask"), py::arg("advantages"), py::arg("old_logps") = py::none(),
      py::arg("ref_logps") = py::none(), py::arg("epsilon") = 0.2, py::arg("epsilon_high") = 0.28,
      py::arg("beta") = 0.0, py::arg("loss_type") = "dapo", py::arg("tokens") = 0.0,
      "(loss, clipped_low, clipped_high, kl) of GRPO's clipped objective for completions [S, T]");
}

}  // namespace colossal::python
