"""LoRA against PEFT, and under every layout. A random LLaMA built by transformers is fine-tuned by
train_llama --lora_rank; the adapter it saves opens in PEFT on the transformers model with our
merged model's logits, and PEFT's merge_and_unload equals our --merge_lora directory. An adapter
PEFT initialises and saves is served by infer_llama --lora and continued by train_llama
--lora_adapter with PEFT's logits. colossal verify holds DDP, ZeRO-1/2, Gemini, tp 2 and pp 2 LoRA
runs to one process, and bad targets and ranks are named."""
import json
import os
import subprocess
import sys

import pytest
import torch

from conftest import APPS, colossal_run

TEXT = ("It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want "
        "of a wife. Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy disposition.")
COMMON = ["--max_steps", "3", "--batch_size", "2", "--max_length", "64", "--sample_tokens", "0", "--eval_interval", "0",
          "--lr", "5e-3"]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A transformers LlamaForCausalLM directory (random weights) with a byte-level BPE tokenizer."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    d = tmp_path_factory.mktemp("lora_base")
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([TEXT] * 10, trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<s>", "</s>", "<pad>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(d)
    tokenizer.save_pretrained(d)
    return d


def ids(base):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(base)(TEXT[:90], return_tensors="pt").input_ids


def test_our_adapter_opens_in_peft_and_the_merge_equals_pefts(base, tmp_path):
    from peft import PeftModel
    from transformers import LlamaForCausalLM

    out = tmp_path / "run"
    colossal_run(1, f"{APPS}/train_llama", "--pretrained", base, "--output", out, "--lora_rank", "4",
                 "--lora_alpha", "8", "--lora_target", "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj",
                 "--merge_lora", *COMMON)
    config = json.loads((out / "adapter" / "adapter_config.json").read_text())
    assert config["peft_type"] == "LORA" and config["r"] == 4 and config["lora_alpha"] == 8
    x = ids(base)
    peft_model = PeftModel.from_pretrained(LlamaForCausalLM.from_pretrained(base), out / "adapter").eval()
    ours = LlamaForCausalLM.from_pretrained(out / "model").eval()
    plain = LlamaForCausalLM.from_pretrained(base).eval()
    with torch.no_grad():
        want, got, before = peft_model(x).logits, ours(x).logits, plain(x).logits
    assert (want - before).abs().max().item() > 1e-3  # the adapter learned something
    assert (want - got).abs().max().item() < 1e-4
    merged = peft_model.merge_and_unload()
    mine = dict(ours.named_parameters())
    worst = max((p - mine[name]).abs().max().item() for name, p in merged.named_parameters())
    assert worst < 1e-5, worst


def test_a_peft_adapter_is_served_and_continued_with_peft_logits(base, tmp_path):
    """get_peft_model with random B (so the adapter changes the output), saved by PEFT: infer_llama
    --lora serves it with PEFT's greedy tokens; train_llama --lora_adapter starts from its values."""
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM

    torch.manual_seed(3)
    model = get_peft_model(LlamaForCausalLM.from_pretrained(base),
                           LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "v_proj", "down_proj"]))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.3)
    model.save_pretrained(tmp_path / "peft_adapter")
    model.eval()
    import colossal
    got = colossal.llama.generate(str(base), "It is a truth", max_new_tokens=12, temperature=0,
                                  repetition_penalty=1.0, return_tokens=True, lora=str(tmp_path / "peft_adapter"))
    from transformers import AutoTokenizer
    prompt_ids = AutoTokenizer.from_pretrained(base)("It is a truth", return_tensors="pt").input_ids
    with torch.no_grad():
        want = model.generate(prompt_ids, max_new_tokens=12, do_sample=False)[0, prompt_ids.shape[1]:].tolist()
    if want and want[-1] == model.config.eos_token_id:
        want = want[:-1]
    assert got["tokens"][:len(want)] == want
    # Continuing it: zero steps of training leave the adapter as PEFT saved it.
    _, text = colossal_run(1, f"{APPS}/train_llama", "--pretrained", base, "--output", tmp_path / "cont",
                           "--lora_adapter", tmp_path / "peft_adapter", "--lr", "1e-12", "--max_steps", "1",
                           "--batch_size", "1", "--max_length", "32", "--sample_tokens", "0", "--eval_interval", "0")
    assert "lora: continuing" in text
    from safetensors.torch import load_file
    theirs = load_file(tmp_path / "peft_adapter" / "adapter_model.safetensors")
    ours = load_file(tmp_path / "cont" / "adapter" / "adapter_model.safetensors")
    assert sorted(theirs) == sorted(ours)
    for k in theirs:
        assert (theirs[k] - ours[k]).abs().max().item() < 1e-6, k


@pytest.mark.parametrize("layout", [["--plugin", "ddp"], ["--plugin", "zero1"], ["--plugin", "zero2"],
                                    ["--plugin", "gemini"], ["--plugin", "hybrid", "--tp", "2"],
                                    ["--plugin", "hybrid", "--pp", "2", "--num_microbatches", "2"]])
def test_lora_under_each_layout_follows_one_process(layout, tmp_path):
    """colossal verify on train_llama's default model: losses, adapter gradients and parameters
    (the frozen ones included: unchanged) against one process."""
    cmd = [f"{APPS}/colossal", "verify", "--nproc_per_node", "2", "--steps", "2", "--", f"{APPS}/train_llama",
           "--lora_rank", "4", "--lora_init", "gaussian", "--output", str(tmp_path / "run"), *COMMON[:-2], *layout]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "PASS: the layout matches one process" in out, out
    assert "lora_A.weight" in out or "lora_B.weight" in out, out  # the adapters are what was compared


@pytest.mark.parametrize("flags, message", [
    (["--lora_rank", "4", "--lora_target", "qq_proj"], "target 'qq_proj' matches no linear layer; the model's are: "),
    (["--lora_rank", "100000"], "must be between 1 and the layer's smaller side"),
    (["--lora_rank", "4", "--lora_target", "lm_head"], "lm_head: adapters go on linear layers, not on a vocabulary head "
                                                        "(train it in full through modules_to_save)"),
    (["--merge_lora"], "--merge_lora needs --lora_rank > 0"),
])
def test_bad_lora_settings_are_named(flags, message, tmp_path):
    r = subprocess.run([f"{APPS}/train_llama", "--output", str(tmp_path / "run"), *COMMON, *flags],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    assert message in r.stdout + r.stderr, r.stdout + r.stderr


def test_booster_enable_lora_from_python(base, tmp_path):
    """Booster.enable_lora before boost (ColossalAI's API): only the adapters train under ZeRO-2,
    the base stays bitwise, enable_lora after boost is refused, and save_pretrained writes the
    merged weights transformers reads."""
    script = tmp_path / "lora_booster.py"
    script.write_text(f"""
import sys, torch, colossal
colossal.launch(seed=0)
model = colossal.llama.LlamaForCausalLM.from_pretrained({str(base)!r})
booster = colossal.Booster(plugin="zero2")
adapted = booster.enable_lora(model, rank=4, alpha=8, target_modules=["q_proj", "v_proj"])
assert adapted == [f"model.layers.{{i}}.self_attn.{{n}}" for i in range(2) for n in ("q_proj", "v_proj")], adapted
params = dict(model.named_parameters())
base_q = params["model.layers.0.self_attn.q_proj.weight"].detach().clone()
optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
model, optimizer, *_ = booster.boost(model, optimizer)
ids = torch.randint(3, 200, (2, 16), generator=torch.Generator().manual_seed(0))
losses = []
for _ in range(4):
    optimizer.zero_grad()
    loss = model(ids, labels=ids)
    booster.backward(loss, optimizer)
    optimizer.step()
    losses.append(loss.item())
assert losses[-1] < losses[0], losses
assert torch.equal(params["model.layers.0.self_attn.q_proj.weight"], base_q)
try:
    booster.enable_lora(model, rank=4)
    sys.exit("enable_lora after boost was accepted")
except ValueError as e:
    assert "after boost" in str(e)
model.save_pretrained({str(tmp_path / "merged")!r})
print("ok", losses)
""")
    colossal_run(1, sys.executable, script)
    from transformers import LlamaForCausalLM
    merged = LlamaForCausalLM.from_pretrained(tmp_path / "merged")
    base_model = LlamaForCausalLM.from_pretrained(base)
    names = {n for n, _ in merged.named_parameters()}
    assert not any("lora" in n for n in names)
    diff = (merged.model.layers[0].self_attn.q_proj.weight - base_model.model.layers[0].self_attn.q_proj.weight).abs().max()
    assert diff.item() > 0  # the adapter folded in
    assert torch.equal(merged.model.layers[0].self_attn.k_proj.weight, base_model.model.layers[0].self_attn.k_proj.weight)
