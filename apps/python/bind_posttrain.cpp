// colossal._C.posttrain: the preference losses train_llama --mode dpo uses, on tensors a caller
// brings (log-probabilities from any model): for checking against TRL's, and for Python loops.
#include <torch/csrc/utils/pybind.h>

#include "apps/python/bindings.h"
#include "core/posttrain/preference_loss.h"

namespace colossal::python {
namespace py = pybind11;

void bind_posttrain(py::module_& m) {
  auto p = m.def_submodule("posttrain", "preference losses (DPO, IPO, SimPO, ORPO) and the reward model's");
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
}

}  // namespace colossal::python
