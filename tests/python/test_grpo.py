"""GRPO (--mode grpo) on the shared loop: the completions come from the generation engine in the
same process (tests/llama/rollout_test.cpp checks them against the training model's own sampling),
so two ranks follow one process holding both ranks' prompts under DDP, Gemini (the engine samples
from the gathered weights) and tensor parallelism (colossal verify); a reward function from Python
is called on every completion with the prompt and answer, and one that raises fails the run with
its message and the prompt's file and line, saving no model."""
import subprocess

import pytest

from conftest import APPS, colossal_run

colossal = pytest.importorskip("colossal")

GRPO = ["--mode", "grpo", "--batch_size", "2", "--num_generations", "4", "--max_completion_length", "8",
        "--max_length", "64", "--sample_tokens", "0", "--eval_interval", "-1"]


@pytest.fixture(scope="module")
def warm(tmp_path_factory):
    """A small model fine-tuned for 60 steps on the built-in conversations, and the run's prompts."""
    out = tmp_path_factory.mktemp("grpo_warm")
    colossal_run(1, f"{APPS}/train_llama", "--mode", "sft", "--packing", "--output", out, "--max_steps", "60",
                 "--eval_interval", "-1", "--sample_tokens", "0")
    return out


@pytest.mark.parametrize("layout,tolerances", [
    (["--plugin", "ddp"], []),
    # Gemini: the engine samples from the gathered weights. The first step's loss is zero in exact
    # arithmetic (at ratio 1 the advantages of a group sum to zero), ~1e-8 from rounding alone, so
    # it is compared absolutely.
    (["--plugin", "gemini"], ["--loss_atol", "1e-6"]),
    # Tensor parallelism: the same, and the gradient is a sum of per-completion gradients weighted
    # by advantages that cancel, so the tp slices' other summation order (~1e-7 per term) shows
    # magnified: 6e-5 at step 1, 3.4e-4 at step 2 (at --lr 1e-4 and 1e-6 alike: not the update).
    (["--plugin", "hybrid", "--tp", "2"], ["--loss_atol", "1e-6", "--grad_rtol", "1e-3"]),
])
def test_grpo_under_each_layout_follows_one_process(layout, tolerances, warm, tmp_path):
    """colossal verify: two steps of two ranks against one process holding both replicas'
    prompts; the completions are seeded per prompt and sample, so both sample the same ones."""
    cmd = [f"{APPS}/colossal", "verify", "--nproc_per_node", "2", "--steps", "2", *tolerances, "--",
           f"{APPS}/train_llama", "--output", str(tmp_path / "run"), "--pretrained", str(warm / "model"),
           "--max_steps", "3", "--reward", "partial_match", "--lr", "1e-4", *GRPO, *layout]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "PASS: the layout matches one process" in out, out


def test_a_python_reward_is_called_on_every_completion(warm, tmp_path):
    calls = []

    def reward(prompt, completion, answer):
        calls.append((prompt, completion, answer))
        return float(len(completion.strip()) <= 2)

    summary = colossal.llama.train(reward=reward, mode="grpo", pretrained=str(warm / "model"),
                                   output=str(tmp_path / "run"), max_steps=2, batch_size=2, num_generations=4,
                                   max_completion_length=8, max_length=64, sample_tokens=0, eval_interval=-1)
    assert summary["exit_code"] == 0
    assert len(calls) == 2 * 2 * 4
    assert all(p.startswith(("What is", "Reverse the letters")) and a for p, _, a in calls), calls[:3]
    # The log line at the last step covers both steps: the mean of every reward returned.
    assert summary["metrics"]["reward"] == pytest.approx(sum(float(len(c.strip()) <= 2) for _, c, _ in calls) / 16)


def test_a_reward_that_raises_fails_the_step_and_saves_nothing(warm, tmp_path):
    def reward(prompt, completion, answer):
        raise ValueError("the grader is offline")

    with pytest.raises(Exception) as err:
        colossal.llama.train(reward=reward, mode="grpo", pretrained=str(warm / "model"), output=str(tmp_path / "run"),
                             max_steps=2, batch_size=2, num_generations=4, max_completion_length=8, max_length=64,
                             sample_tokens=0, eval_interval=-1)
    message = str(err.value)
    assert "the reward function failed on the prompt at" in message and "grpo_train.jsonl:" in message, message
    assert "the grader is offline" in message, message
    assert not (tmp_path / "run" / "model").exists()
    assert not (tmp_path / "run" / "checkpoints").exists() or not any((tmp_path / "run" / "checkpoints").iterdir())


RISE = """
import json, os, sys
import colossal

out, model, prompts = sys.argv[1], sys.argv[2], sys.argv[3]
rewards = []

def reward(prompt, completion, answer):
    r = float(completion.strip().startswith("1"))
    rewards.append(r)
    return r

colossal.llama.train(reward=reward, mode="grpo", pretrained=model, dataset=prompts, output=out, max_steps=30,
                     batch_size=4, num_generations=8, max_completion_length=8, max_length=64, lr=3e-4, sample_tokens=0,
                     eval_interval=-1, log_interval=10)
with open(f"{out}/rewards-{os.environ.get('RANK', '0')}.json", "w") as f:
    json.dump(rewards, f)
"""


@pytest.mark.parametrize("nproc", [1, 2])
def test_grpo_raises_the_reward(nproc, warm, tmp_path):
    """The policy gradient works: with a reward the model can reach by changing its first token (a
    reply to an addition that starts with "1"), 30 steps of GRPO from the warm model raise the mean
    reward of the sampled completions by at least 0.12 from the first ten steps to the last ten, on
    one process and on two data-parallel ranks, where each rank's own completions rise."""
    import json
    import random
    import sys

    # Addition prompts (the built-in GRPO prompts are reversals, whose replies are letters).
    rng = random.Random(0)
    pairs = [(rng.randrange(100), rng.randrange(100)) for _ in range(400)]
    prompts = tmp_path / "additions.jsonl"
    prompts.write_text("".join(json.dumps({"prompt": f"What is {a} + {b}?", "answer": str(a + b)}) + "\n"
                               for a, b in pairs))
    script = tmp_path / "rise.py"
    script.write_text(RISE)
    colossal_run(nproc, sys.executable, script, tmp_path / "run", warm / "model", prompts, timeout=300)
    per_step = 4 * 8  # completions per rank per step
    for rank in range(nproc):
        rewards = json.loads((tmp_path / "run" / f"rewards-{rank}.json").read_text())
        assert len(rewards) == 30 * per_step
        first, last = sum(rewards[:10 * per_step]) / (10 * per_step), sum(rewards[-10 * per_step:]) / (10 * per_step)
        assert last >= first + 0.12, (rank, first, last)


@pytest.mark.parametrize("flags,message", [
    (["--grpo_beta", "0.04"], "--grpo_beta 0.04 needs --lora_rank"),
    (["--plugin", "hybrid", "--pp", "2"], "--mode grpo under pipeline, sequence or expert parallelism"),
    (["--plugin", "gemini", "--lora_rank", "4"], "--mode grpo with LoRA under --plugin gemini is not supported"),
    (["--num_generations", "1"], "--num_generations"),
])
def test_grpo_settings_that_cannot_work_are_refused(flags, message, tmp_path):
    r = subprocess.run([f"{APPS}/train_llama", "--mode", "grpo", "--output", str(tmp_path), *flags],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and message in r.stdout + r.stderr, r.stdout + r.stderr
