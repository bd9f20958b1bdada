"""Launching where clusters launch: torchrun (the one in the project's python) as the launcher, unchanged, for
every trainer; torchrun's error file; restarts from the newest checkpoint; torchrun's PET_* variables and flag
spellings in `colossal run`; one job per output.

Run by CTest with the build's apps in COLOSSAL_APPS.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import APPS, TINY_LLAMA, colossal_run

STEP_LOSS = re.compile(r"step (\d+)/\d+ .*?loss ([0-9.]+)")
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def step_losses(text):
    """Every (step, loss) line in order (train_sora's stages both count from 1)."""
    return [(int(s), float(l)) for s, l in STEP_LOSS.findall(text)]


def torchrun(*args, timeout=600, env=None):
    r = subprocess.run([*TORCHRUN, *map(str, args)], capture_output=True, text=True, timeout=timeout,
                       env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})
    return r.returncode, r.stdout + r.stderr


def llama_flags(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(TINY_LLAMA))
    return ["--model_config", tmp_path / "config.json", "--vocab_size", "600", "--batch_size", "2", "--max_length",
            "64", "--sample_tokens", "0"]


# Each trainer's smallest run: (flags before the output directory flag, the output flag).
TRAINERS = {
    "train_llama": lambda d: [*llama_flags(d), "--output"],
    "train_vit": lambda d: ["--batch_size", "8", "--save_dir"],
    "train_bert": lambda d: ["--save_dir"],
    "train_recsys": lambda d: ["--held_out_fraction", "0.9", "--save_dir"],
    "train_sora": lambda d: ["--frames", "4", "--height", "16", "--width", "16", "--frame_stride", "8", "--window_step",
                             "0", "--vae_channels", "8", "--save_dir"],
}
COMMON = ["--max_steps", "3", "--log_interval", "1", "--eval_interval", "-1", "--load_checkpoint", "none"]


@pytest.mark.parametrize("trainer", sorted(TRAINERS))
def test_every_trainer_under_torchrun_follows_colossal_run(tmp_path, trainer):
    """torchrun --no-python starts our binaries as they are; the losses equal `colossal run`'s exactly. torchrun
    sets TORCHELASTIC_USE_AGENT_STORE: the ranks join its store (rank 0 binding another on MASTER_PORT would fail)."""
    flags = [*COMMON, *TRAINERS[trainer](tmp_path)]
    code, ours = colossal_run(2, f"{APPS}/{trainer}", *flags, tmp_path / "ours", timeout=600)
    code, theirs = torchrun("--no-python", "--standalone", "--nproc_per_node", "2", f"{APPS}/{trainer}", *flags,
                            tmp_path / "torchrun", env={"COLOSSAL_LOG_LEVEL": "debug"})
    assert code == 0, theirs
    joined = re.findall(r"\[dist\] rank (\d)/2 .*\(store hosted by the launcher\), from torchrun; joining the store as "
                        r"a client", theirs)
    assert sorted(joined) == ["0", "1"], theirs
    ours_losses, their_losses = step_losses(ours), step_losses(theirs)
    assert len(ours_losses) >= 3, ours
    assert their_losses == ours_losses, f"colossal run {ours_losses}\ntorchrun {their_losses}"


def test_torchrun_c10d_rendezvous_and_its_agent_store(tmp_path):
    """torchrun's elastic rendezvous (--nnodes 1:2 --rdzv_backend c10d): the workers join the agent's store."""
    flags = [*COMMON, *llama_flags(tmp_path)]
    _, ours = colossal_run(2, f"{APPS}/train_llama", *flags, "--output", tmp_path / "ours")
    port = __import__("conftest").free_port()
    code, theirs = torchrun("--no-python", "--nnodes", "1:2", "--rdzv_backend", "c10d", "--rdzv_endpoint",
                            f"127.0.0.1:{port}", "--rdzv_conf", "last_call_timeout=1", "--nproc_per_node", "2",
                            f"{APPS}/train_llama", *flags, "--output", tmp_path / "torchrun")
    assert code == 0, theirs
    assert step_losses(theirs) == step_losses(ours)


def test_a_failing_rank_writes_torchruns_error_file(tmp_path):
    """The first fatal error goes to TORCHELASTIC_ERROR_FILE in torch's JSON shape: torchrun's summary shows our
    message (not "To enable traceback see ..."), with the file's path."""
    code, out = torchrun("--no-python", "--standalone", "--nproc_per_node", "2", f"{APPS}/train_llama",
                         *COMMON, *llama_flags(tmp_path), "--output", tmp_path / "o", "--lr", "-1")
    assert code != 0
    summary = out[out.index("Root Cause"):]
    assert "--lr: expected >= 0, got -1" in summary, out
    assert "error_file: <N/A>" not in summary and "error.json" in summary, summary
    assert "To enable traceback" not in summary, summary
    # colossal run reads the same files: its FAILED line carries the message.
    code, out = colossal_run(2, f"{APPS}/train_llama", *COMMON, *llama_flags(tmp_path), "--output", tmp_path / "c",
                             "--lr", "-1", check=False)
    assert code == 1
    assert re.search(r"FAILED: rank \d \(node 0, local rank \d\) failed with exit code 1: train_llama: .*--lr: "
                     r"expected >= 0, got -1", out), out


def test_torchrun_max_restarts_resumes_from_the_newest_checkpoint(tmp_path):
    """Rank 1 is killed in the first attempt once step 10's checkpoint is complete; torchrun restarts the group
    (--max-restarts 1) and the job goes on from that checkpoint to the same last loss as a run never stopped."""
    flags = [*llama_flags(tmp_path), "--max_steps", "40", "--log_interval", "1", "--eval_interval", "-1",
             "--save_interval", "5"]
    _, straight = colossal_run(2, f"{APPS}/train_llama", *flags, "--output", tmp_path / "straight")
    out = tmp_path / "restarted"
    cmd = " ".join(map(str, [f"{APPS}/train_llama", *flags, "--output", out]))
    # Killed once `latest` names step 10 or later: that checkpoint is complete (a step-N folder alone may be
    # half-written, and the restart then rightly resumes from the one before).
    script = (f"if [ $TORCHELASTIC_RESTART_COUNT = 0 ] && [ $RANK = 1 ]; then {cmd} & pid=$!; "
              f"while :; do s=$(sed 's/step-//' {out}/checkpoints/latest 2>/dev/null); [ \"${{s:-0}}\" -ge 10 ] && break; "
              f"sleep 0.05; done; kill -9 $pid; exit 1; fi; exec {cmd}")
    code, text = torchrun("--no-python", "--standalone", "--nproc_per_node", "2", "--max-restarts", "1",
                          "bash", "-c", script)
    assert code == 0, text
    resumed = re.findall(r"resumed: \S*step-(\d+)", text)
    assert resumed and int(resumed[-1]) >= 10, text
    assert step_losses(text)[-1] == step_losses(straight)[-1]


def test_colossal_run_reads_torchruns_pet_variables_and_flag_spellings(tmp_path):
    """A Kubeflow pod's environment (PET_NNODES, PET_NPROC_PER_NODE, ...) is colossal run's default; torchrun's
    hyphenated flags are accepted; bad values are named with the variable."""
    show = ["bash", "-c", "echo world=$WORLD_SIZE rank=$RANK port=$MASTER_PORT"]
    env = {**os.environ, "PET_NPROC_PER_NODE": "2", "PET_NNODES": "1", "PET_MASTER_PORT": "0"}
    r = subprocess.run([f"{APPS}/colossal", "run", *show], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    assert sorted(re.findall(r"world=(\d) rank=(\d)", r.stdout)) == [("2", "0"), ("2", "1")], r.stdout
    # A flag wins over the variable.
    r = subprocess.run([f"{APPS}/colossal", "run", "--nproc-per-node", "1", "--standalone", *show],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0 and re.findall(r"world=(\d)", r.stdout) == ["1"], r.stdout + r.stderr
    r = subprocess.run([f"{APPS}/colossal", "run", *show], capture_output=True, text=True, timeout=60,
                       env={**env, "PET_NPROC_PER_NODE": "many"})
    assert r.returncode != 0
    assert "PET_NPROC_PER_NODE" in r.stderr and "'many'" in r.stderr, r.stderr
    r = subprocess.run([f"{APPS}/colossal", "run", "--rdzv-backend", "etcd", *show], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0 and "--rdzv_backend: expected c10d or static, got 'etcd'" in r.stderr, r.stderr


def test_one_job_per_output(tmp_path):
    """A second job on the same output refuses, naming the first (pid, host, command); after the first is killed
    with -9, a new job takes the stale lock and resumes from the first one's newest checkpoint."""
    base = [*llama_flags(tmp_path), "--log_interval", "50", "--eval_interval", "-1", "--save_interval", "20",
            "--output", tmp_path / "out"]
    flags = [*base, "--max_steps", "100000"]
    first = subprocess.Popen([f"{APPS}/train_llama", *map(str, flags)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        lock = tmp_path / "out" / "checkpoints" / ".colossal-job.lock"
        for _ in range(600):
            if (tmp_path / "out" / "checkpoints" / "step-20").exists():
                break
            assert first.poll() is None, "the first job ended"
            time.sleep(0.1)
        assert f"pid: {first.pid}" in lock.read_text()
        second = subprocess.run([f"{APPS}/train_llama", *map(str, flags)], capture_output=True, text=True, timeout=120)
        assert second.returncode == 1
        assert re.search(rf"checkpoints \(--output/--save_dir\) is in use by another job: pid {first.pid} on host "
                         r"\S+, started [0-9-]+ [0-9:]+ UTC: \S*train_llama", second.stderr), second.stderr
        # Under a launcher every rank stops, not only rank 0.
        code, out = colossal_run(2, f"{APPS}/train_llama", *flags, check=False)
        assert code == 1 and f"pid {first.pid}" in out, out
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    third = subprocess.run([f"{APPS}/train_llama", *map(str, base), "--max_steps", "30"], capture_output=True,
                           text=True, timeout=300)
    assert third.returncode == 0, third.stderr
    text = third.stdout + third.stderr
    assert f"took over the lock of a job that is gone (pid {first.pid}" in text, text
    assert re.search(r"resumed: \S+/step-\d+", text), text
    assert not lock.exists(), "a finished job leaves its lock file behind"


def test_metrics_endpoint_serves_prometheus_text_that_advances(tmp_path):
    """--metrics_port: rank 0 serves /metrics (the other rank binds nothing); prometheus_client's parser reads it;
    the step counter advances between two scrapes; the checkpoint and restart figures are there."""
    from prometheus_client.parser import text_string_to_metric_families
    import urllib.request
    from conftest import free_port
    port = free_port()
    job = subprocess.Popen([f"{APPS}/colossal", "run", "--nproc_per_node", "2", "--", f"{APPS}/train_llama",
                            *map(str, llama_flags(tmp_path)), "--output", str(tmp_path / "out"), "--max_steps", "100000",
                            "--log_interval", "5", "--eval_interval", "-1", "--save_interval", "50",
                            "--metrics_port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def scrape():
        for _ in range(600):
            try:
                text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2).read().decode()
                values = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
                if "colossal_train_last_checkpoint_step" in values:
                    return values
            except OSError:
                assert job.poll() is None, job.stdout.read()
            time.sleep(0.1)
        raise AssertionError("no metrics with a checkpoint within a minute")

    try:
        first = scrape()
        time.sleep(1.5)
        second = scrape()
    finally:
        job.send_signal(signal.SIGINT)
        out = job.communicate(timeout=120)[0]
    assert second["colossal_train_step_total"] > first["colossal_train_step_total"] > 0, (first, second)
    for name in ("colossal_train_loss", "colossal_train_lr", "colossal_train_grad_norm", "colossal_train_mfu",
                 "colossal_train_tokens_per_second", "colossal_train_resident_memory_bytes",
                 "colossal_train_total_steps", "colossal_train_last_checkpoint_age_seconds"):
        assert name in second, (name, second)
    assert second["colossal_train_total_steps"] == 100000
    assert second["colossal_train_last_checkpoint_step"] % 50 == 0
    assert second["colossal_train_restarts"] == 0
    assert out.count("metrics: http://0.0.0.0:") == 1, out  # rank 0 only


def test_infer_llama_tensor_parallel_under_torchrun(tiny_llama):
    """infer_llama --tp 2 started by torchrun prints the text one process prints (greedy)."""
    _, model, _ = tiny_llama
    args = ["--model", str(model), "--prompt", "It is a truth universally acknowledged", "--temperature", "0",
            "--max_new_tokens", "12"]
    one = subprocess.run([f"{APPS}/infer_llama", *args], capture_output=True, text=True, timeout=120, check=True).stdout
    code, out = torchrun("--no-python", "--standalone", "--nproc_per_node", "2", f"{APPS}/infer_llama", "--tp", "2",
                         *args)
    assert code == 0, out
    assert one.strip() and one.strip() in out, f"one process: {one!r}\ntorchrun: {out}"
