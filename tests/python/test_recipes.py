"""The recipes in apps/python/recipes, each run end to end at a small size as a user runs it:
`colossal run --nproc_per_node N python apps/python/recipes/X.py`.

Run by CTest with the built package on PYTHONPATH and the build's apps in COLOSSAL_APPS.
"""
import re
import subprocess

import pytest
import torch
from safetensors.torch import load_file

import colossal
from conftest import APPS, run_recipe

STEP_LOSS = re.compile(r"step (\d+)/\d+ loss ([0-9.]+)")


@pytest.fixture(scope="module")
def finetuned(tiny_llama, tmp_path_factory):
    """The fine-tuning recipe on one process (ZeRO-2, i.e. plain), on two under ZeRO-2 and on two
    under Gemini (ZeRO-3 on the C++ model): (stdout by run, output dirs by run)."""
    _, model, data = tiny_llama
    out, dirs = {}, {}
    for run, n, plugin in ((1, 1, "zero2"), (2, 2, "zero2"), ("gemini", 2, "gemini")):
        dirs[run] = tmp_path_factory.mktemp(f"finetuned_{run}")
        _, out[run] = run_recipe(n, "finetune_llama.py", "--model_dir", model, "--data", data, "--max_records", 400,
                                 "--block_size", 64, "--global_batch_size", 8, "--steps", 5, "--log_interval", 1,
                                 "--lr", 1e-3, "--plugin", plugin, "--output", dirs[run])
    return out, dirs


@pytest.mark.parametrize("run", [2, "gemini"])
def test_finetune_on_two_ranks_matches_one(finetuned, run):
    out, dirs = finetuned
    losses = {r: {int(s): float(l) for s, l in STEP_LOSS.findall(out[r])} for r in (1, run)}
    assert sorted(losses[1]) == [1, 2, 3, 4, 5], out[1]
    for step, loss in losses[1].items():
        assert losses[run][step] == pytest.approx(loss, rel=1e-5), (step, losses)
    assert losses[1][5] < losses[1][1], "five steps at lr 1e-3 should lower the loss"
    one, two = load_file(dirs[1] / "model.safetensors"), load_file(dirs[run] / "model.safetensors")
    assert one.keys() == two.keys()
    for name in one:
        scale = one[name].abs().max().item()
        assert (one[name] - two[name]).abs().max().item() <= 1e-5 * max(scale, 1.0), name


def test_finetuned_model_opens_in_transformers_and_cpp(finetuned):
    transformers = pytest.importorskip("transformers")
    _, dirs = finetuned
    model_dir = dirs[2]
    ids = torch.tensor([colossal.llama.Tokenizer(str(model_dir / "tokenizer.model")).encode("Emma Woodhouse, handsome")])
    hf = transformers.LlamaForCausalLM.from_pretrained(str(model_dir), torch_dtype=torch.float32).eval()
    with torch.no_grad():
        theirs = hf(ids).logits
    ours = colossal.llama.LlamaForCausalLM.from_pretrained(model_dir).eval()
    with torch.no_grad():
        mine = ours(ids)
    assert torch.allclose(mine, theirs, atol=1e-4, rtol=1e-4), (mine - theirs).abs().max().item()
    # and the tokenizer files transformers reads give the same ids as the SentencePiece model
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(model_dir))
    assert hf_tok("Emma Woodhouse, handsome")["input_ids"] == ids[0].tolist()
    # the C++ binary loads it too
    r = subprocess.run([f"{APPS}/infer_llama", "--model", str(model_dir), "--prompt", "Emma", "--temperature", "0",
                        "--max_new_tokens", "4"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("Emma"), r.stderr


def test_finetune_recipe_names_bad_input(tiny_llama, tmp_path):
    _, model, _ = tiny_llama
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "fine"}\n{"title": "no text"}\n')
    rc, out = run_recipe(1, "finetune_llama.py", "--model_dir", model, "--data", bad, "--output", tmp_path / "o",
                         check=False)
    assert rc != 0 and f"{bad}:2: expected a 'text' field" in out, out
    rc, out = run_recipe(1, "finetune_llama.py", "--model_dir", tmp_path / "none", "--data", bad, check=False)
    assert rc != 0 and "--model_dir" in out and "does not exist" in out, out


def test_resnet_under_zero2_learns_and_keeps_replicas_equal(tmp_path):
    _, out = run_recipe(2, "train_resnet_zero2.py", "--steps", 100, "--eval_interval", 50,
                        "--checkpoint_dir", tmp_path / "ck", "--output", tmp_path / "model")
    accuracy = [float(a) for a in re.findall(r"held-out accuracy ([0-9.]+)", out)]
    assert len(accuracy) >= 2, out
    assert accuracy[-1] >= 0.9, out  # chance is 0.25
    assert "replicas agree: True" in out, out
    assert (tmp_path / "ck" / "latest").exists() and (tmp_path / "model").is_dir()


def test_serve_recipe_answers_every_rank_through_the_openai_client(finetuned):
    _, dirs = finetuned
    prompt = "It is a truth universally acknowledged"
    _, out = run_recipe(2, "serve_openai.py", "--model_dir", dirs[2], "--prompt", prompt, "--max_tokens", 8)
    completions = re.findall(r"completion: .* -> '(.*)' \((\d+) tokens", out)
    assert len(completions) == 2, out
    assert out.count("chat (streamed in") == 2 and "server stopped" in out, out
    # greedy through HTTP (OpenAI's defaults for what the request leaves out) = the engine in-process
    expected = colossal.llama.generate(dirs[2], prompt, max_new_tokens=8, temperature=0, top_k=0, top_p=1.0,
                                       repetition_penalty=1.0)
    for text, _ in completions:
        assert text == expected.replace("'", "\\'"), (text, expected)
