"""The applications as Python functions (colossal.llama.train / generate / Server, colossal.vit.train):
the same flags and the same numbers as the binaries, errors as exceptions, Ctrl-C as KeyboardInterrupt.

Run by CTest with the built package on PYTHONPATH and the build's apps in COLOSSAL_APPS.
"""
import re
import signal
import subprocess
import sys
import time

import pytest

import colossal
from conftest import APPS, TINY_LLAMA, colossal_run

STEP_LOSS = re.compile(r"step (\d+)/\d+ .*?loss ([0-9.]+)")


def step_losses(text):
    return {int(s): float(l) for s, l in STEP_LOSS.findall(text)}


def test_llama_train_function_matches_the_binary_on_two_ranks(tmp_path):
    """colossal.llama.train(**flags) under `colossal run` trains exactly as train_llama with those flags."""
    (tmp_path / "config.json").write_text(__import__("json").dumps(TINY_LLAMA))
    flags = dict(model_config=tmp_path / "config.json", vocab_size=600, max_steps=4, batch_size=2, max_length=64,
                 eval_interval=0, sample_tokens=0, log_interval=1, plugin="zero2", load_checkpoint="none")
    args = [a for k, v in flags.items() for a in (f"--{k}", str(v))]
    _, cli = colossal_run(2, f"{APPS}/train_llama", "--output", tmp_path / "cli", *args)
    script = (f"import colossal, json; s = colossal.llama.train(output={str(tmp_path / 'py')!r}, "
              + ", ".join(f"{k}={str(v)!r}" if isinstance(v, (str, type(tmp_path))) else f"{k}={v!r}"
                          for k, v in flags.items())
              + "); print('summary', json.dumps(s))")
    _, py = colossal_run(2, sys.executable, "-c", script)
    cli_losses, py_losses = step_losses(cli), step_losses(py)
    assert sorted(cli_losses) == [1, 2, 3, 4], cli
    assert py_losses == cli_losses, f"binary {cli_losses}\npython {py_losses}"
    summaries = [__import__("json").loads(line.split("summary ", 1)[1]) for line in py.splitlines() if "summary {" in line]
    assert len(summaries) == 2, py
    for s in summaries:  # every rank gets the result
        assert s["exit_code"] == 0
        assert s["metrics"]["steps"] == 4
        assert s["metrics"]["loss"] == pytest.approx(cli_losses[4], rel=1e-3)
        assert s["outputs"]["model"].endswith("/py/model")
    assert (tmp_path / "py" / "model" / "model.safetensors").exists()


def test_generate_matches_infer_llama(tiny_llama):
    _, model, _ = tiny_llama
    prompt = "It is a truth universally acknowledged"
    cli = subprocess.run([f"{APPS}/infer_llama", "--model", str(model), "--prompt", prompt, "--temperature", "0",
                          "--max_new_tokens", "12"], capture_output=True, text=True, check=True).stdout
    ours = colossal.llama.generate(model, prompt, max_new_tokens=12, temperature=0)
    assert cli.rstrip("\n") == prompt + ours
    both = colossal.llama.generate(model, [prompt, "Emma"], max_new_tokens=12, temperature=0)
    assert both[0] == ours and isinstance(both[1], str)


def test_generate_takes_the_options_infer_llama_has(tiny_llama):
    """One inference setup: the engine's settings are infer_llama's flags, from Python too."""
    _, model, _ = tiny_llama
    prompt = "It is a truth universally acknowledged"
    plain = colossal.llama.generate(model, prompt, max_new_tokens=8, temperature=0)
    # The model as its own draft: speculative decoding leaves greedy output unchanged.
    drafted = colossal.llama.generate(model, prompt, max_new_tokens=8, temperature=0, draft_model=str(model),
                                      num_speculative_tokens=3, device="cpu", threads=1)
    assert drafted == plain
    assert isinstance(colossal.llama.generate(model, prompt, max_new_tokens=4, temperature=0, dtype="int8"), str)
    with pytest.raises(RuntimeError, match=r"--block_size: expected in \[1, 4096\], got 0"):
        colossal.llama.generate(model, prompt, block_size=0)
    with pytest.raises(RuntimeError, match="dtype: expected fp32, bf16, fp16, int8 or int4"):
        colossal.llama.generate(model, prompt, dtype="fp64")


def test_tokenizer_round_trip(tiny_llama):
    _, model, _ = tiny_llama
    tok = colossal.llama.Tokenizer(str(model / "tokenizer.model"))
    ids = tok.encode("Emma Woodhouse, handsome, clever, and rich")
    assert ids[0] == tok.bos_id and len(ids) > 3 and max(ids) < tok.vocab_size
    assert tok.decode(ids) == "Emma Woodhouse, handsome, clever, and rich"


def test_vit_train_function(tmp_path):
    s = colossal.vit.train(max_steps=3, save_dir=str(tmp_path), log_interval=1)
    assert s["exit_code"] == 0 and s["metrics"]["steps"] == 3
    assert 0 <= s["metrics"]["eval_top1"] <= s["metrics"]["eval_top5"] <= 1
    assert (tmp_path / "model" / "model.safetensors").exists()


def test_errors_arrive_with_the_cpp_message(tmp_path):
    with pytest.raises(RuntimeError, match="nonsense"):
        colossal.llama.train(plugin="nonsense", output=str(tmp_path))
    with pytest.raises(RuntimeError, match="--max_steps"):
        colossal.llama.train(max_steps="many", output=str(tmp_path))
    with pytest.raises(RuntimeError, match="'/nonexistent' does not exist"):
        colossal.llama.generate("/nonexistent", "x")
    with pytest.raises(RuntimeError, match="unknown sampling option 'temprature'"):
        colossal.llama.generate("/nonexistent", "x", temprature=0)


def train_forever(tmp_path, load_checkpoint="auto"):
    """A script training the tiny model for 100,000 steps, logging every step."""
    (tmp_path / "config.json").write_text(__import__("json").dumps(TINY_LLAMA))
    return (f"import colossal; colossal.llama.train(output={str(tmp_path)!r}, model_config="
            f"{str(tmp_path / 'config.json')!r}, vocab_size=600, max_steps=100000, batch_size=2, max_length=64, "
            f"eval_interval=0, sample_tokens=0, log_interval=1, load_checkpoint={load_checkpoint!r})")


def interrupt_at_step_3(command):
    """Starts `command`, sends SIGINT once it logs step 3: (return code, output, seconds to stop)."""
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen = ""
    deadline = time.time() + 240
    while "step 3/" not in seen and time.time() < deadline:  # training is under way
        line = proc.stdout.readline()
        if not line:
            break
        seen += line
    assert "step 3/" in seen, seen
    proc.send_signal(signal.SIGINT)
    t0 = time.time()
    out, _ = proc.communicate(timeout=60)
    return proc.returncode, seen + out, time.time() - t0


def test_ctrl_c_stops_training_with_keyboard_interrupt(tmp_path):
    rc, out, seconds = interrupt_at_step_3([sys.executable, "-u", "-c", train_forever(tmp_path)])
    assert seconds < 30, "Ctrl-C took more than 30 s to stop the run"
    assert rc != 0
    assert "KeyboardInterrupt" in out, out[-2000:]
    assert "step 100000/" not in out


def test_ctrl_c_to_the_launcher_stops_every_rank(tmp_path):
    """Ctrl-C on `colossal run` reaches each rank's training loop, which stops at its next step."""
    rc, out, seconds = interrupt_at_step_3([f"{APPS}/colossal", "run", "--nproc_per_node", "2", "--", sys.executable,
                                            "-u", "-c", train_forever(tmp_path, "none")])
    assert seconds < 30, "Ctrl-C took more than 30 s to stop the job"
    assert rc != 0
    # A rank stops in its loop with KeyboardInterrupt; the launcher then stops the rest (one may
    # already wait in a collective for the rank that left) and says why.
    assert "KeyboardInterrupt" in out, out[-3000:]
    assert "interrupted by signal 2" in out, out[-3000:]


def test_sora_train_and_generate_functions(tmp_path):
    s = colossal.sora.train(frames=4, height=16, width=16, frame_stride=8, window_step=0, vae_channels=8, hidden=32,
                            depth=1, heads=2, batch_size=4, max_steps=3, save_dir=str(tmp_path), load_checkpoint="none")
    assert s["exit_code"] == 0 and s["metrics"]["vae_psnr"] > 0 and s["metrics"]["dit_flow_loss"] > 0
    g = colossal.sora.generate(model_dir=str(tmp_path), prompt="a potted tree", steps=2, out=str(tmp_path / "a.mp4"))
    assert g["exit_code"] == 0 and (tmp_path / "a.mp4").stat().st_size > 0
    assert (tmp_path / "a_frames.png").exists()


def test_recsys_train_function(tmp_path):
    s = colossal.recsys.train(max_steps=20, save_dir=str(tmp_path), held_out_fraction=0.9, load_checkpoint="none")
    assert s["exit_code"] == 0 and s["metrics"]["steps"] == 20
    assert 0.5 < s["metrics"]["eval_auc"] <= 1
    assert (tmp_path / "log.jsonl").exists()
