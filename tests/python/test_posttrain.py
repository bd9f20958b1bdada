"""Post-training against TRL and against one process. The preference losses (DPO's sigmoid, IPO,
SimPO, ORPO) equal TRL's own code on the same log-probabilities (DPOTrainer's loss step, driven
with the sequences' sums; CPOTrainer.cpo_loss; ORPOTrainer.odds_ratio_loss); train_llama
--mode dpo follows one process under DDP, ZeRO-2, tp 2, sp 2 and LoRA (colossal verify), learns
the built-in pairs (margins and accuracy up on held-out pairs), resumes from a checkpoint with its
reference table, and names bad pairs by file and line."""
import json
import subprocess
import types

import pytest
import torch

from conftest import APPS, colossal_run

trl = pytest.importorskip("trl")
posttrain = pytest.importorskip("colossal")._C.posttrain

B = 5


def pairs(seed):
    g = torch.Generator().manual_seed(seed)
    n_c = torch.randint(1, 9, (B,), generator=g)
    n_r = torch.randint(1, 9, (B,), generator=g)
    # Summed log-probabilities: per-token means in (-4, -0.1).
    c = -(torch.rand(B, generator=g, dtype=torch.float64) * 3.9 + 0.1) * n_c
    r = -(torch.rand(B, generator=g, dtype=torch.float64) * 3.9 + 0.1) * n_r
    rc = c + torch.randn(B, generator=g, dtype=torch.float64)
    rr = r + torch.randn(B, generator=g, dtype=torch.float64)
    return c, r, n_c, n_r, rc, rr


class _Accelerator:
    device = torch.device("cpu")

    def gather(self, x):
        return x

    gather_for_metrics = gather


def trl_dpo_loss(loss_type, beta, c, r, n_c, n_r, rc, rr):
    """TRL's DPOTrainer loss step on a stand-in model whose per-token log-probabilities put each
    sequence's sum on its first answer position, with completion masks of the answers' lengths."""
    from collections import defaultdict
    from trl import DPOTrainer

    T = int(max(n_c.max(), n_r.max())) + 2
    mask = torch.zeros(2 * B, T, dtype=torch.long)
    for i, n in enumerate(torch.cat([n_c, n_r]).tolist()):
        mask[i, 1:1 + n] = 1
    log_probs = torch.zeros(2 * B, T - 1, dtype=torch.float64)
    log_probs[:, 0] = torch.cat([c, r])
    outputs = types.SimpleNamespace(log_probs=log_probs, entropy=torch.zeros(2 * B, T - 1),
                                    mean_logits=torch.zeros(2 * B, T - 1),
                                    is_top1=torch.zeros(2 * B, T - 1, dtype=torch.bool))
    self = types.SimpleNamespace(
        model=types.SimpleNamespace(training=True), accelerator=_Accelerator(), aux_loss_enabled=False,
        ld_alpha=None, precompute_ref_logps=True, f_divergence_type="reverse_kl", loss_types=[loss_type],
        loss_weights=[1.0], beta=beta, label_smoothing=0.0, use_weighting=False, _metrics=defaultdict(
            lambda: defaultdict(list)), _total_train_tokens=0, _tp_size=1)
    inputs = {"input_ids": torch.zeros(2 * B, T, dtype=torch.long), "attention_mask": torch.ones(2 * B, T),
              "completion_mask": mask, "ref_chosen_logps": rc, "ref_rejected_logps": rr}
    loss = DPOTrainer._compute_loss(self, lambda **kw: outputs, inputs, False)
    return loss, self._metrics["train"]


@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo"])
def test_dpo_and_ipo_equal_trls_dpo_trainer(loss_type):
    c, r, n_c, n_r, rc, rr = pairs(1)
    want, metrics = trl_dpo_loss(loss_type, 0.2, c, r, n_c, n_r, rc, rr)
    loss, chosen, rejected = posttrain.preference_loss(c, r, n_c.double(), n_r.double(), rc, rr, loss_type=loss_type,
                                                       beta=0.2)
    assert abs(loss.item() - want.item()) < 1e-12, (loss.item(), want.item())
    assert abs(chosen.mean().item() - metrics["rewards/chosen"][0]) < 1e-12
    assert abs(rejected.mean().item() - metrics["rewards/rejected"][0]) < 1e-12
    assert abs((chosen > rejected).double().mean().item() - metrics["rewards/accuracies"][0]) < 1e-6  # fp32 in TRL


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_simpo_equals_trls_cpo_trainer(smoothing):
    from trl.experimental.cpo import CPOTrainer

    c, r, n_c, n_r, _, _ = pairs(2)
    self = types.SimpleNamespace(alpha=0.0, loss_type="simpo", simpo_gamma=0.7, beta=2.0, label_smoothing=smoothing,
                                 accelerator=_Accelerator())
    # CPOTrainer's SimPO reads per-token mean log-probabilities (average_log_prob for simpo).
    losses, want_c, want_r = CPOTrainer.cpo_loss(self, c / n_c, r / n_r)
    loss, chosen, rejected = posttrain.preference_loss(c, r, n_c.double(), n_r.double(), loss_type="simpo", beta=2.0,
                                                       label_smoothing=smoothing, simpo_gamma=0.7)
    assert abs(loss.item() - losses.mean().item()) < 1e-12
    assert torch.allclose(chosen, want_c) and torch.allclose(rejected, want_r)


def test_orpo_equals_trls_orpo_trainer():
    from trl.experimental.orpo import ORPOTrainer

    c, r, n_c, n_r, _, _ = pairs(3)
    self = types.SimpleNamespace(beta=0.25, accelerator=_Accelerator())
    losses, want_c, want_r, _, _ = ORPOTrainer.odds_ratio_loss(self, c / n_c, r / n_r)
    nll = -c.sum() / n_c.sum()  # ORPOTrainer's cross entropy over the chosen answers' tokens
    loss, chosen, rejected = posttrain.preference_loss(c, r, n_c.double(), n_r.double(), loss_type="orpo", beta=0.25)
    assert abs(loss.item() - (nll - losses.mean()).item()) < 1e-6  # TRL computes the odds in fp32
    assert torch.allclose(chosen, want_c.double(), atol=1e-6)


COMMON = ["--mode", "dpo", "--batch_size", "2", "--max_length", "64", "--sample_tokens", "0", "--eval_interval", "-1"]


@pytest.mark.parametrize("layout", [["--plugin", "ddp"], ["--plugin", "zero2"], ["--plugin", "hybrid", "--tp", "2"],
                                    ["--plugin", "hybrid", "--sp", "2", "--sp_mode", "all_to_all"],
                                    ["--plugin", "gemini"],
                                    ["--plugin", "ddp", "--lora_rank", "4", "--lora_init", "gaussian",
                                     "--loss_type", "orpo"]])
def test_dpo_under_each_layout_follows_one_process(layout, tmp_path):
    """colossal verify: the DPO losses, gradients and parameters of two steps against one process
    running both replicas' pairs (its own reference table, scored the same way). A small learning
    rate: the first DPO gradient is a difference of the two answers' nearly equal gradients, so
    elements within rounding of zero take Adam's full-size first step with either sign, and the
    second step's gradient (another near-cancelling difference) magnifies that; the mismatch
    measured grows in proportion to the learning rate (2.5e-4 relative at 1e-3, 5e-5 at 2e-4)."""
    cmd = [f"{APPS}/colossal", "verify", "--nproc_per_node", "2", "--steps", "2", "--", f"{APPS}/train_llama",
           "--output", str(tmp_path / "run"), "--max_steps", "3", *COMMON, "--lr", "2e-4", *layout]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "PASS: the layout matches one process" in out, out


def log_lines(path, kind):
    """--log_file's evaluations (kind "eval") or progress lines (kind "step", no event)."""
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [x for x in lines if x.get("event", "step") == kind]


def test_dpo_learns_the_built_in_pairs_and_resumes_with_its_reference(tmp_path):
    """The default run (the built-in pairs, 300 steps of 8): the held-out reward margin and
    accuracy rise from 0. A run stopped at step 200 and resumed (the checkpoint carries the
    reference table) logs the same losses as the uninterrupted run."""
    run = ["--output", str(tmp_path / "run"), "--mode", "dpo", "--sample_tokens", "0", "--eval_interval", "300",
           "--log_interval", "50", "--save_interval", "200", "--log_file", str(tmp_path / "log.jsonl")]
    colossal_run(1, f"{APPS}/train_llama", *run, timeout=900)
    evals = log_lines(tmp_path / "log.jsonl", "eval")
    first, last = evals[0], evals[-1]
    assert first["rewards/margins"] == pytest.approx(0, abs=1e-6)  # the model is its own reference at step 0
    assert last["rewards/margins"] > 0.3 and last["rewards/accuracies"] > 0.6, last
    assert (tmp_path / "run" / "checkpoints" / "step-200" / "preference_reference.safetensors").exists()
    steps = {e["step"]: e["loss"] for e in log_lines(tmp_path / "log.jsonl", "step")}
    # Resume from step 200 into a second log: the same losses from step 250 on.
    resumed = [a if a != str(tmp_path / "log.jsonl") else str(tmp_path / "resumed.jsonl") for a in run]
    colossal_run(1, f"{APPS}/train_llama", *resumed, "--load_checkpoint",
                 str(tmp_path / "run" / "checkpoints" / "step-200"), timeout=900)
    again = {e["step"]: e["loss"] for e in log_lines(tmp_path / "resumed.jsonl", "step")}
    for step in (250, 300):
        assert again[step] == pytest.approx(steps[step], rel=1e-5), (step, again, steps)


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    """train_llama's built-in tokenizer (trained on the corpus by a one-step run)."""
    d = tmp_path_factory.mktemp("tok")
    colossal_run(1, f"{APPS}/train_llama", "--output", d, "--max_steps", "1", "--batch_size", "1", "--max_length",
                 "32", "--sample_tokens", "0", "--eval_interval", "-1")
    return d / "tokenizer.model"


@pytest.mark.parametrize("row, message", [
    ({"prompt": "Once upon a time", "chosen": "  ", "rejected": "there was"}, "line 2: empty chosen answer"),
    ({"prompt": "word " * 200, "chosen": "yes", "rejected": "no"}, "line 2: the prompt takes"),
    ({"prompt": [{"role": "user", "content": "hi"}], "chosen": [{"role": "user", "content": "x"}],
      "rejected": [{"role": "assistant", "content": "y"}]}, "line 2: empty chosen answer (no assistant message"),
    ({"chosen": "a"}, "line 2: expected \"rejected\""),
])
def test_bad_pairs_are_named_by_file_and_line(row, message, tokenizer, tmp_path):
    good = {"prompt": "It is a truth", "chosen": "universally acknowledged", "rejected": "acknowledged universally"}
    data = tmp_path / "pairs.jsonl"
    data.write_text(json.dumps(good) + "\n" + json.dumps(row) + "\n")
    code, out = colossal_run(1, f"{APPS}/train_llama", *COMMON, "--dataset", data, "--tokenizer", tokenizer,
                             "--output", tmp_path / "run", "--max_steps", "1", check=False)
    assert code != 0
    assert f"'{data}' {message}" in out, out


@pytest.mark.parametrize("layout", [["--plugin", "ddp"], ["--plugin", "zero2"], ["--plugin", "gemini"],
                                    ["--plugin", "hybrid", "--tp", "2"],
                                    ["--plugin", "hybrid", "--sp", "2", "--sp_mode", "all_to_all"]])
def test_reward_model_under_each_layout_follows_one_process(layout, tmp_path):
    """--mode rm: the score head's and the decoder's gradients against one process (under sp the
    rank holding each sequence's last token contributes its score). A small learning rate, as for
    DPO: Adam's first step takes gradient elements within rounding of zero to full size."""
    cmd = [f"{APPS}/colossal", "verify", "--nproc_per_node", "2", "--steps", "2", "--", f"{APPS}/train_llama",
           "--output", str(tmp_path / "run"), "--max_steps", "3", "--mode", "rm", *COMMON[2:], "--lr", "1e-4", *layout]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "PASS: the layout matches one process" in out, out
    # Every trained tensor compared, the score head's among them; the unused lm_head only as a
    # parameter (frozen: no gradient).
    assert "(39 gradients and 40 parameters compared per step)" in out, out


def test_the_reward_model_opens_in_transformers_with_our_rewards(tmp_path):
    """The saved directory is a LlamaForSequenceClassification: transformers' rewards on the
    held-out pairs give the held-out loss, accuracy and margin our last evaluation logged."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    out = tmp_path / "run"
    colossal_run(1, f"{APPS}/train_llama", "--mode", "rm", "--output", out, "--max_steps", "20", "--batch_size", "4",
                 "--max_length", "64", "--sample_tokens", "0", "--eval_interval", "20", "--log_file",
                 tmp_path / "log.jsonl")
    ours = log_lines(tmp_path / "log.jsonl", "eval")[-1]
    config = json.loads((out / "model" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForSequenceClassification"] and config["num_labels"] == 1
    model = AutoModelForSequenceClassification.from_pretrained(out / "model").eval()
    tok = AutoTokenizer.from_pretrained(out / "model")
    losses, correct, margins = [], [], []
    for line in (out / "data" / "preference_valid.jsonl").read_text().splitlines():
        pair = json.loads(line)
        prompt = tok(pair["prompt"]).input_ids  # BOS + prompt, as the standard format is tokenised

        def reward(answer):
            ids = prompt + tok(answer, add_special_tokens=False).input_ids + [tok.eos_token_id]
            with torch.no_grad():
                return model(torch.tensor([ids])).logits[0, 0].double()

        c, r = reward(pair["chosen"]), reward(pair["rejected"])
        losses.append(-torch.nn.functional.logsigmoid(c - r).item())
        correct.append(float(c > r))
        margins.append((c - r).item())
    n = len(losses)
    assert sum(losses) / n == pytest.approx(ours["loss"], rel=1e-4, abs=1e-5)
    assert sum(correct) / n == pytest.approx(ours["accuracy"], abs=1.5 / n)
    assert sum(margins) / n == pytest.approx(ours["margin"], rel=1e-3, abs=1e-4)


def grpo_reference(logps, old, ref, mask, adv, eps_low, eps_high, beta, loss_type, tokens):
    """GRPO's clipped objective spelled out in float64 (TRL's GRPOTrainer._compute_loss, one term
    at a time)."""
    ratio = torch.exp(logps - old)
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    a = adv.unsqueeze(1)
    per_token = -torch.min(ratio * a, clipped * a)
    if beta:
        per_token = per_token + beta * (torch.exp(ref - logps) - (ref - logps) - 1)
    if loss_type == "grpo":
        return ((per_token * mask).sum(1) / mask.sum(1).clamp(min=1)).mean()
    return (per_token * mask).sum() / tokens


@pytest.mark.parametrize("loss_type,beta", [("dapo", 0.0), ("dapo", 0.04), ("grpo", 0.0), ("grpo", 0.1)])
def test_grpo_objective_and_advantages_equal_a_float64_reference(loss_type, beta):
    g = torch.Generator().manual_seed(4)
    G, N, T = 4, 3, 7
    rewards = torch.randint(0, 2, (N * G,), generator=g).double()
    rewards[:G] = 1.0  # one group all right: no signal
    want_adv = rewards.view(N, G) - rewards.view(N, G).mean(1, keepdim=True)
    want_adv = (want_adv / (rewards.view(N, G).std(1, keepdim=True) + 1e-4)).reshape(-1)
    assert torch.allclose(posttrain.group_advantages(rewards, G), want_adv, atol=1e-12)
    keep = posttrain.groups_with_signal(rewards, G)
    assert keep.tolist() == [False] * G + [bool(rewards[i * G:(i + 1) * G].std() > 0) for i in range(1, N)
                                           for _ in range(G)]
    mask = (torch.rand(N * G, T, generator=g) > 0.3).double()
    old = -torch.rand(N * G, T, generator=g, dtype=torch.float64) * 3
    ref = old + 0.2 * torch.randn(N * G, T, generator=g, dtype=torch.float64)
    logps = (old + 0.4 * torch.randn(N * G, T, generator=g, dtype=torch.float64)).requires_grad_()
    mine = logps.detach().clone().requires_grad_()
    tokens = 50.0
    want = grpo_reference(logps, old, ref, mask, want_adv, 0.2, 0.28, beta, loss_type, tokens)
    loss, low, high, kl = posttrain.grpo_loss(mine, mask, want_adv, old_logps=old, ref_logps=ref, beta=beta,
                                              loss_type=loss_type, tokens=tokens)
    assert abs(loss.item() - want.item()) < 1e-12
    want.backward()
    loss.backward()
    assert torch.allclose(mine.grad, logps.grad, atol=1e-12)
    ratio = torch.exp(logps.detach() - old)
    a = want_adv.unsqueeze(1)
    assert low == pytest.approx((((ratio < 0.8) & (a < 0)).double() * mask).sum().item() / mask.sum().item())
    assert high == pytest.approx((((ratio > 1.28) & (a > 0)).double() * mask).sum().item() / mask.sum().item())
    assert low > 0 and high > 0
    # On-policy (old = the weights being trained): the ratio is 1 and the gradient is -A per token.
    on = logps.detach().clone().requires_grad_()
    posttrain.grpo_loss(on, mask, want_adv, loss_type="dapo", tokens=tokens)[0].backward()
    assert torch.allclose(on.grad, -want_adv.unsqueeze(1) * mask / tokens, atol=1e-12)
