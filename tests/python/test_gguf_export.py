"""`colossal export --gguf`: a directory train_llama wrote, as the GGUF file llama.cpp's own converter
(convert_hf_to_gguf.py, unchanged but for naming the pre-tokenizer) writes from it: the same tensors
bit for bit in f32, f16, bf16 and q8_0 (names, types, shapes, bytes: the query/key rows interleaved,
quantized blocks rounded as llama.cpp's reference quantizer rounds them) and the same metadata
(hyper-parameters, vocabulary, token types and scores, special ids, chat template); q4_0, which the
converter does not write, equals the `gguf` package's Q4_0 quantizer on the converter's f32 tensors.
The files load back here with the directory's greedy tokens, and run in llama.cpp
(llama-completion) with the same greedy text where its binaries are built
(scripts/build_llama_cpp.sh). The K-quant mixes (q4_k_m, q5_k_m, q6_k) take llama-quantize's types
and accuracy, and a Q4_K_M file's perplexity is llama-perplexity's."""
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
    return trained(tmp_path_factory.mktemp("export"), hidden=64, mlp=176, positions=128, steps=300)


def trained(d, hidden, mlp, positions, steps):
    """A 2-layer model of that shape that train_llama trains (its vocabulary of 600, held-out text
    in run/data), as its Hugging Face directory."""
    config = {"hidden_size": hidden, "intermediate_size": mlp, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "max_position_embeddings": positions, "vocab_size": 600}
    (d / "config.json").write_text(json.dumps(config))
    subprocess.run([f"{APPS}/train_llama", "--output", str(d / "run"), "--model_config", str(d / "config.json"),
                    "--vocab_size", "600", "--max_steps", str(steps), "--batch_size", "8", "--max_length", "64",
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


def llama_cpp_tool(name):
    path = llama_completion()
    return path.parent / name if path else None


def llama_completion_text(path):
    """llama-completion's greedy continuation of PROMPT on the file (12 tokens, one thread)."""
    # llama.cpp logs (the generated text included) through a background thread that the process
    # may leave unflushed at exit (seen here: rc 0, the text cut anywhere); a run is complete when
    # its closing timings were written, so up to 10 runs are taken to find one.
    for _ in range(10):
        r = subprocess.run([str(llama_completion()), "-m", str(path), "-p", PROMPT, "-n", "12", "--temp", "0",
                            "--top-k", "1", "-t", "1", "--no-warmup", "-no-cnv", "--no-display-prompt"],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        if "total time" in r.stderr:
            return r.stdout.strip()
    raise AssertionError("no complete llama-completion run in 10")


needs_llama_cpp = pytest.mark.skipif(llama_completion() is None, reason="llama.cpp's binaries are not built here "
                                     "(scripts/build_llama_cpp.sh builds them; CI does not, for time)")


@needs_llama_cpp
@pytest.mark.parametrize("outtype", ["f16", "q8_0"])
def test_llama_cpp_runs_the_file_with_our_greedy_text(model, outtype, tmp_path):
    path = export(model, tmp_path / f"m-{outtype}.gguf", outtype)
    theirs = llama_completion_text(path)
    ours = generate(path)  # in the file's formats (q8_0: int8 activations per block of 32, as llama.cpp's)
    assert ours.startswith(PROMPT)
    assert theirs == ours[len(PROMPT):].strip(), (ours, theirs)


# K-quant mixes: a model whose rows are whole super-blocks of 256 (hidden 256, MLP 512), 2 layers.
@pytest.fixture(scope="module")
def wide_model(tmp_path_factory):
    return trained(tmp_path_factory.mktemp("export_k"), hidden=256, mlp=512, positions=256, steps=400)


def held_out_text(model_dir, path):
    """The run's held-out documents as one plain text file (what llama-perplexity reads)."""
    lines = (model_dir.parent / "data" / "valid.jsonl").read_text().splitlines()
    path.write_text("\n".join(json.loads(line)["text"] for line in lines))
    return path


def more_bits(layer, layers):  # llama-quantize's use_more_bits
    return layer < layers // 8 or layer >= 7 * layers // 8 or (layer - layers // 8) % 3 == 2


def expected_type(outtype, name, layers=2):
    """The type llama-quantize gives each tensor of such a model without an importance matrix."""
    if not name.endswith(".weight") or "norm" in name:
        return "F32"
    base = {"q4_k_m": "Q4_K", "q5_k_m": "Q5_K", "q6_k": "Q6_K"}[outtype]
    if name == "output.weight":
        return "Q6_K"
    if outtype != "q6_k" and (name.endswith("attn_v.weight") or name.endswith("ffn_down.weight")):
        return "Q6_K" if more_bits(int(name.split(".")[1]), layers) else base
    return base


# Each type's error against the weights, as a fraction of Q4_0's (the gguf package's quantizer) on
# the same tensor: measured 0.83-0.84 (Q4_K), 0.42-0.43 (Q5_K), 0.21 (Q6_K).
ERROR_VS_Q4_0 = {"Q4_K": 0.9, "Q5_K": 0.5, "Q6_K": 0.25}


def rms_error(tensor, ref):
    import gguf
    values = gguf.quants.dequantize(tensor.data, tensor.tensor_type).reshape(ref.shape)
    return float(np.sqrt(((values.astype(np.float64) - ref) ** 2).mean()))


@pytest.mark.parametrize("outtype", ["q4_k_m", "q5_k_m", "q6_k"])
def test_k_quant_mixes_take_llama_quantizes_types_and_accuracy(wide_model, outtype, tmp_path):
    """Every tensor in the type llama-quantize picks, its blocks read by the `gguf` package within
    the type's error; where llama.cpp is built, llama-quantize of the same weights (our f32 file,
    byte for byte the converter's) gives the same types, and our error is within 0.1% of its, tensor
    by tensor (its float sums round a few fits differently), Q6_K's blocks equal byte for byte."""
    import gguf
    ours = {t.name: t for t in reader(export(wide_model, tmp_path / "ours.gguf", outtype)).tensors}
    f32_path = export(wide_model, tmp_path / "f32.gguf", "f32")
    f32 = {t.name: np.asarray(t.data).astype(np.float64) for t in reader(f32_path).tensors}
    assert sorted(ours) == sorted(f32)
    errors = {}
    for name, t in ours.items():
        assert t.tensor_type.name == expected_type(outtype, name), (name, t.tensor_type.name)
        if t.tensor_type.name == "F32":
            assert np.array_equal(np.asarray(t.data), f32[name]), name
            continue
        errors[name] = rms_error(t, f32[name])
        q4_0 = gguf.quants.quantize(f32[name].astype(np.float32), gguf.GGMLQuantizationType.Q4_0)
        q4_0_error = float(np.sqrt(((gguf.quants.dequantize(q4_0, gguf.GGMLQuantizationType.Q4_0) - f32[name]) ** 2)
                                   .mean()))
        assert errors[name] < ERROR_VS_Q4_0[t.tensor_type.name] * q4_0_error, (name, errors[name], q4_0_error)
    assert {t.tensor_type.name for t in ours.values()} >= ({"Q6_K"} if outtype == "q6_k" else {"Q6_K", "Q4_K"}
                                                            if outtype == "q4_k_m" else {"Q6_K", "Q5_K"})
    quantize = llama_cpp_tool("llama-quantize")
    if quantize is None:
        pytest.skip("llama-quantize is not built here (the types and errors above were checked)")
    subprocess.run([str(quantize), str(f32_path), str(tmp_path / "theirs.gguf"), outtype.upper()],
                   check=True, capture_output=True, timeout=300)
    theirs = {t.name: t for t in reader(tmp_path / "theirs.gguf").tensors}
    for name, t in ours.items():
        assert t.tensor_type == theirs[name].tensor_type, name
        if name in errors:
            assert errors[name] <= 1.001 * rms_error(theirs[name], f32[name]), name
        if t.tensor_type.name == "Q6_K":
            assert np.array_equal(raw(t), raw(theirs[name])), name


def perplexity(path, text, *flags):
    r = subprocess.run([f"{APPS}/infer_llama", "--model", str(path), "--perplexity", str(text),
                        "--perplexity_length", "128", "--threads", "2", *flags], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    return float(r.stdout.split("perplexity ")[1].split()[0])


def test_a_q4_k_m_file_runs_as_its_dequantized_weights(wide_model, tmp_path):
    """Ours or llama-quantize's (where built) Q4_K_M file: the greedy text in the file's blocks (the
    integer kernels against Q8_K activations) equals the fp32 path on the dequantized weights, the
    held-out perplexity through the decode path within 0.5% of the fp32 one, and of llama-perplexity's
    on the same file (where built); llama-completion gives our greedy text on our file."""
    text = held_out_text(wide_model, tmp_path / "valid.txt")
    files = [export(wide_model, tmp_path / "ours.gguf", "q4_k_m")]
    quantize = llama_cpp_tool("llama-quantize")
    if quantize is not None:
        f32 = export(wide_model, tmp_path / "f32.gguf", "f32")
        subprocess.run([str(quantize), str(f32), str(tmp_path / "theirs.gguf"), "Q4_K_M"], check=True,
                       capture_output=True, timeout=300)
        files.append(tmp_path / "theirs.gguf")
    for path in files:
        greedy = generate(path)
        assert greedy == generate(path, "--dtype", "fp32"), path
        assert len(set(greedy[len(PROMPT):].split())) >= 3, greedy
        decode = perplexity(path, text, "--perplexity_chunk", "1")
        dense = perplexity(path, text, "--dtype", "fp32")
        assert abs(decode / dense - 1) < 0.005, (path, decode, dense)
        if quantize is not None:
            # Its background logger can drop the closing lines at exit (as llama-completion's): up to 10 runs.
            for _ in range(10):
                r = subprocess.run([str(llama_cpp_tool("llama-perplexity")), "-m", str(path), "-f", str(text), "-c",
                                    "128", "-t", "2"], capture_output=True, text=True, timeout=600)
                assert r.returncode == 0, r.stderr[-3000:]
                if "Final estimate: PPL = " in r.stdout + r.stderr:
                    break
            theirs = float((r.stdout + r.stderr).split("Final estimate: PPL = ")[1].split()[0])
            assert abs(decode / theirs - 1) < 0.005, (path, decode, theirs)
    if llama_completion() is not None:
        assert llama_completion_text(files[0]) == generate(files[0])[len(PROMPT):].strip()


@pytest.mark.parametrize("change, message", [
    ({"model_type": "gemma"}, "model_type 'gemma'; this version exports llama, mistral, qwen2 and qwen3"),
    ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "rope_scaling 'linear' is not exported"),
    (None, "tokenizer.json: pre-tokenizer 'Metaspace'; this version exports byte-level BPE"),
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
