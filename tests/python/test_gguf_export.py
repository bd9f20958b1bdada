"""`colossal export --gguf`: a directory train_llama wrote, as the GGUF file llama.cpp's own converter
(convert_hf_to_gguf.py, unchanged but for naming the pre-tokenizer) writes from it: the same tensors
bit for bit in f32, f16, bf16 and q8_0 (names, types, shapes, bytes: the query/key rows interleaved,
quantized blocks rounded as llama.cpp's reference quantizer rounds them) and the same metadata
(hyper-parameters, vocabulary, token types and scores, special ids, chat template); q4_0, which the
converter does not write, equals the `gguf` package's Q4_0 quantizer on the converter's f32 tensors.
The files load back here with the directory's greedy tokens, and run in llama.cpp
(llama-completion) with the same greedy text where its binaries are built
(scripts/build_llama_cpp.sh)."""
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

APPS = os.environ.get("COLOSSAL_APPS", "")
HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PROMPT = "Once upon a time"


def llama_cpp_source():
    return subprocess.run(["bash", str(ROOT / "scripts" / "build_llama_cpp.sh"), "--root"], capture_output=True,
                          text=True, check=True).stdout.strip()


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """A small model train_llama trains for 300 steps (varied greedy text), with an intermediate
    size (176) that is not whole blocks of 32: the quantized types keep ffn_down in f16, as the
    converter does."""
    d = tmp_path_factory.mktemp("export")
    config = {"hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "max_position_embeddings": 128, "vocab_size": 600}
    (d / "config.json").write_text(json.dumps(config))
    subprocess.run([f"{APPS}/train_llama", "--output", str(d / "run"), "--model_config", str(d / "config.json"),
                    "--vocab_size", "600", "--max_steps", "300", "--batch_size", "8", "--max_length", "64",
                    "--lr", "3e-3", "--sample_tokens", "0", "--eval_interval", "-1"],
                   check=True, capture_output=True, timeout=600)
    return d / "run" / "model"


def export(model_dir, path, outtype):
    r = subprocess.run([f"{APPS}/colossal", "export", "--model", str(model_dir), "--gguf", str(path), "--outtype",
                        outtype], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return path


def convert(model_dir, path, outtype):
    done = subprocess.run([sys.executable, str(HERE.parent / "llama" / "convert_with_llama_cpp.py"),
                           llama_cpp_source(), str(model_dir), str(path), "--pre", "default", "--outtype", outtype],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return path


def reader(path):
    import gguf
    return gguf.GGUFReader(str(path))


def raw(tensor):
    return np.asarray(tensor.data).view(np.uint8).reshape(-1)


@pytest.mark.parametrize("outtype", ["f16", "q8_0", "bf16", "f32"])
def test_export_equals_llama_cpps_converter(model, outtype, tmp_path):
    ours = reader(export(model, tmp_path / "ours.gguf", outtype))
    theirs = reader(convert(model, tmp_path / "theirs.gguf", outtype))
    a = {t.name: t for t in ours.tensors}
    b = {t.name: t for t in theirs.tensors}
    assert sorted(a) == sorted(b)
    for name, t in a.items():
        assert t.tensor_type == b[name].tensor_type, (name, t.tensor_type.name, b[name].tensor_type.name)
        assert list(t.shape) == list(b[name].shape), name
        assert np.array_equal(raw(t), raw(b[name])), name
    if outtype == "q8_0":
        assert a["blk.0.ffn_down.weight"].tensor_type.name == "F16", "176 columns are not whole q8_0 blocks"
        assert a["blk.0.ffn_up.weight"].tensor_type.name == "Q8_0"
    # Every key but the converter's own naming of the model (taken from the directory's name).
    skip = {"general.name", "general.size_label"}
    keys_a = {k for k in ours.fields if not k.startswith("GGUF.")} - skip
    keys_b = {k for k in theirs.fields if not k.startswith("GGUF.")} - skip
    assert keys_a == keys_b
    for k in keys_a:
        assert ours.fields[k].contents() == theirs.fields[k].contents(), k


def test_q4_0_is_the_gguf_packages_quantizer(model, tmp_path):
    import gguf
    ours = reader(export(model, tmp_path / "ours.gguf", "q4_0"))
    f32 = {t.name: t for t in reader(convert(model, tmp_path / "f32.gguf", "f32")).tensors}
    checked = 0
    for t in ours.tensors:
        ref = np.asarray(f32[t.name].data)
        if t.tensor_type.name == "Q4_0":
            want = gguf.quants.quantize(ref, gguf.GGMLQuantizationType.Q4_0)
            checked += 1
        elif t.tensor_type.name == "F16":
            assert t.name.endswith("ffn_down.weight"), t.name  # 176 columns: not whole blocks
            want = ref.astype(np.float16)
        else:
            assert t.tensor_type.name == "F32" and len(t.shape) == 1, t.name
            want = ref
        assert np.array_equal(raw(t), np.asarray(want).view(np.uint8).reshape(-1)), t.name
    assert checked == 2 * 6 + 2  # every layer's q, k, v, o, gate, up, the embedding and the head


def generate(model_path, *flags):
    r = subprocess.run([f"{APPS}/infer_llama", "--model", str(model_path), "--prompt", PROMPT, "--max_new_tokens",
                        "12", "--temperature", "0", "--threads", "1", *flags], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


@pytest.mark.parametrize("outtype, ours", [("f32", "fp32"), ("f16", "fp16")])
def test_exported_files_load_back_with_the_directorys_greedy_text(model, outtype, ours, tmp_path):
    """The same weights as the directory's at --dtype (f16: our own fp16 rounding is llama.cpp's)."""
    path = export(model, tmp_path / f"m-{outtype}.gguf", outtype)
    text = generate(path)
    assert text == generate(model, "--dtype", ours)
    assert len(set(text[len(PROMPT):].split())) >= 3, text  # varied text: a comparison that could fail


def llama_completion():
    bin_dir = Path(os.environ.get("COLOSSAL_CACHE", Path.home() / ".cache" / "colossal-cpp"))
    found = sorted(bin_dir.glob("llama-cpp-python-*/build/bin/llama-completion"))
    return found[-1] if found else None


@pytest.mark.skipif(llama_completion() is None, reason="llama.cpp's binaries are not built here "
                    "(scripts/build_llama_cpp.sh builds them; CI does not, for time)")
@pytest.mark.parametrize("outtype", ["f16", "q8_0"])
def test_llama_cpp_runs_the_file_with_our_greedy_text(model, outtype, tmp_path):
    path = export(model, tmp_path / f"m-{outtype}.gguf", outtype)
    # llama.cpp logs (the generated text included) through a background thread that the process
    # may leave unflushed at exit (seen here: rc 0, the text cut anywhere); a run is complete when
    # its closing timings were written, so up to 10 runs are taken to find one.
    for _ in range(10):
        r = subprocess.run([str(llama_completion()), "-m", str(path), "-p", PROMPT, "-n", "12", "--temp", "0",
                            "--top-k", "1", "-t", "1", "--no-warmup", "-no-cnv", "--no-display-prompt"],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        if "total time" in r.stderr:
            break
    assert "total time" in r.stderr, "no complete llama-completion run in 10"
    ours = generate(path)  # in the file's formats (q8_0: int8 activations per block of 32, as llama.cpp's)
    assert ours.startswith(PROMPT)
    assert r.stdout.strip() == ours[len(PROMPT):].strip(), (ours, r.stdout, r.stderr[-2000:])


@pytest.mark.parametrize("change, message", [
    ({"model_type": "gemma"}, "model_type 'gemma'; this version exports llama, mistral, qwen2 and qwen3"),
    ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "rope_scaling 'linear' is not exported"),
    (None, "has no tokenizer.model"),
])
def test_what_a_file_cannot_hold_is_named(model, change, message, tmp_path):
    import shutil
    d = tmp_path / "model"
    shutil.copytree(model, d)
    if change is None:
        (d / "tokenizer.model").unlink()
    else:
        config = json.loads((d / "config.json").read_text())
        config.update(change)
        (d / "config.json").write_text(json.dumps(config))
    r = subprocess.run([f"{APPS}/colossal", "export", "--model", str(d), "--gguf", str(tmp_path / "m.gguf")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    assert message in r.stdout + r.stderr, r.stdout + r.stderr
    assert not (tmp_path / "m.gguf").exists(), "nothing half-written"
