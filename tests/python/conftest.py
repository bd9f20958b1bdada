"""What the Python suites share: the built apps, `colossal run`, and a tiny trained LLaMA directory."""
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

APPS = os.environ.get("COLOSSAL_APPS", "")
SOURCE = Path(__file__).resolve().parents[2]
RECIPES = SOURCE / "apps" / "python" / "recipes"

TINY_LLAMA = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "max_position_embeddings": 256, "vocab_size": 600}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model_dir, *flags):
    """infer_llama --serve on a free port, once /health answers: (base URL, process)."""
    port = free_port()
    proc = subprocess.Popen([f"{APPS}/infer_llama", "--serve", "--model", str(model_dir), "--port", str(port),
                             "--threads", "1", *flags], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            urllib.request.urlopen(base + "/health", timeout=1)
            return base, proc
        except OSError:
            if proc.poll() is not None:
                break
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("server did not come up:\n" + proc.stdout.read())


def client(base):
    """The openai client on a server from start_server."""
    import openai
    return openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=120)


def colossal_run(nproc, *command, timeout=300, check=True):
    """`colossal run --nproc_per_node N -- command...`: (returncode, stdout + stderr)."""
    cmd = [f"{APPS}/colossal", "run", "--nproc_per_node", str(nproc), "--", *map(str, command)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    out = r.stdout + r.stderr
    if check:
        assert r.returncode == 0, f"{' '.join(cmd)} exited {r.returncode}\n{out}"
    return r.returncode, out


def run_recipe(nproc, recipe, *args, **kw):
    return colossal_run(nproc, sys.executable, RECIPES / recipe, *args, **kw)


@pytest.fixture(scope="session")
def tiny_llama(tmp_path_factory):
    """A tiny model trained for a few steps on the built-in corpus by colossal.llama.train in a
    fresh interpreter: (output directory, model directory, training JSONL)."""
    d = tmp_path_factory.mktemp("tiny_llama")
    (d / "config.json").write_text(json.dumps(TINY_LLAMA))
    script = (f"import colossal; colossal.llama.train(output={str(d)!r}, model_config={str(d / 'config.json')!r}, "
              "vocab_size=600, max_steps=5, batch_size=2, max_length=64, eval_interval=0, sample_tokens=0)")
    subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, timeout=300)
    return d, d / "model", d / "data" / "train.jsonl"
