"""Chat SFT on the shared loop: packed conversations train as the same conversations one per
sample (one step over the same data: the same loss and gradient norm), follow one process under
DDP, ZeRO-2, tp 2 (split_gather) and sp 2 (all_to_all) (colossal verify), and the built-in
conversations' held-out loss falls; NEFTune changes training, not evaluation; packing is refused
where it cannot work, by name."""
import json
import re
import subprocess

import pytest

from conftest import APPS, colossal_run

COMMON = ["--mode", "sft", "--max_length", "64", "--sample_tokens", "0"]


@pytest.fixture(scope="module")
def built_in(tmp_path_factory):
    """One short run on the built-in conversations: its tokenizer and data files."""
    out = tmp_path_factory.mktemp("sft_base")
    colossal_run(1, f"{APPS}/train_llama", "--output", out, "--max_steps", "1", "--eval_interval", "0", *COMMON)
    return out


def log_lines(path, kind):
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    return [x for x in lines if x.get("event", "step") == kind]


def test_packed_step_equals_the_same_conversations_unpacked(built_in, tmp_path):
    data = tmp_path / "six.jsonl"
    data.write_text("".join((built_in / "data" / "chat_train.jsonl").read_text().splitlines(True)[:6]))
    flags = ["--tokenizer", built_in / "tokenizer.model", "--dataset", data, "--eval_interval", "0", "--max_steps", "1",
             "--log_interval", "1", *COMMON]
    _, text = colossal_run(1, f"{APPS}/train_llama", "--output", tmp_path / "probe", "--packing", "--batch_size", "1",
                           *flags)
    packs = int(re.search(r"6 conversations packed into (\d+) samples of 64 tokens", text).group(1))
    assert packs < 6, text
    runs = {}
    for name, extra in {"packed": ["--packing", "--batch_size", str(packs)], "unpacked": ["--batch_size", "6"]}.items():
        colossal_run(1, f"{APPS}/train_llama", "--output", tmp_path / name, "--log_file", tmp_path / f"{name}.jsonl",
                     *extra, *flags)
        runs[name] = log_lines(tmp_path / f"{name}.jsonl", "step")[0]
    for key in ("loss", "grad_norm"):
        assert runs["packed"][key] == pytest.approx(runs["unpacked"][key], rel=1e-5), (key, runs)


@pytest.mark.parametrize("layout", [["--plugin", "ddp"], ["--plugin", "zero2"],
                                    ["--plugin", "hybrid", "--sp", "2", "--sp_mode", "all_to_all"],
                                    ["--plugin", "hybrid", "--tp", "2", "--sp_mode", "split_gather"]])
def test_packed_sft_under_each_layout_follows_one_process(built_in, layout, tmp_path):
    cmd = [f"{APPS}/colossal", "verify", "--nproc_per_node", "2", "--steps", "2", "--", f"{APPS}/train_llama",
           "--output", str(tmp_path / "run"), "--tokenizer", str(built_in / "tokenizer.model"), "--dataset",
           str(built_in / "data" / "chat_train.jsonl"), "--max_steps", "3", "--eval_interval", "-1", "--packing",
           "--batch_size", "2", "--lr", "1e-3", *COMMON, *layout]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "PASS: the layout matches one process" in out, out


def test_built_in_conversations_lower_the_held_out_loss(tmp_path):
    log = tmp_path / "log.jsonl"
    colossal_run(1, f"{APPS}/train_llama", "--output", tmp_path / "run", "--max_steps", "60", "--eval_interval", "60",
                 "--packing", "--log_file", log, *COMMON)
    evals = log_lines(log, "eval")
    assert [e["step"] for e in evals] == [0, 60], evals
    assert evals[1]["loss"] < evals[0]["loss"] - 2.0, evals


def test_neftune_changes_training_not_evaluation(built_in, tmp_path):
    flags = ["--tokenizer", built_in / "tokenizer.model", "--max_steps", "1", "--eval_interval", "1",
             "--log_interval", "1", "--batch_size", "4", *COMMON]
    logs = {}
    for name, extra in {"plain": [], "noisy": ["--neftune_noise_alpha", "5"]}.items():
        _, text = colossal_run(1, f"{APPS}/train_llama", "--output", tmp_path / name, "--log_file",
                               tmp_path / f"{name}.jsonl", *extra, *flags)
        logs[name] = (log_lines(tmp_path / f"{name}.jsonl", "step")[0], log_lines(tmp_path / f"{name}.jsonl", "eval"))
    assert "neftune: embedding noise alpha 5 in training" in text
    assert logs["noisy"][0]["loss"] != logs["plain"][0]["loss"]
    assert logs["noisy"][1][0]["loss"] == logs["plain"][1][0]["loss"], "step 0's evaluation has no noise"


@pytest.mark.parametrize("flags,message", [
    (["--mode", "pretrain", "--packing"], "--packing applies to --mode sft"),
    (["--mode", "sft", "--packing", "--plugin", "hybrid", "--pp", "2"], "--packing under pipeline parallelism"),
    (["--mode", "sft", "--packing", "--plugin", "hybrid", "--sp", "2", "--sp_mode", "ring_attn"],
     "--packing under --sp_mode ring_attn is not supported"),
    (["--mode", "dpo", "--neftune_noise_alpha", "5"], "--neftune_noise_alpha applies to --mode sft, not dpo")])
def test_packing_and_neftune_are_refused_where_they_cannot_work(flags, message, tmp_path):
    r = subprocess.run([f"{APPS}/train_llama", "--output", str(tmp_path), *flags], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0 and message in r.stdout + r.stderr, r.stdout + r.stderr
