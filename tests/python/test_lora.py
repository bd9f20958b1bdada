"""LoRA against PEFT, and under every layout. A random LLaMA built by transformers is fine-tuned by
train_llama --lora_rank; the adapter it saves opens in PEFT on the transformers model with our
merged model's logits, and PEFT's merge_and_unload equals our --merge_lora directory. An adapter
PEFT initialises and saves is served by infer_llama --lora and continued by train_llama
--lora_adapter with PEFT's logits. colossal verify holds DDP, ZeRO-1/2, Gemini, tp 2 and pp 2 LoRA
and QLoRA runs to one process, and bad targets and ranks are named."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

from conftest import APPS, client, colossal_run, free_port, start_server

TEXT = ("It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want "
        "of a wife. Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy disposition.")
COMMON = ["--max_steps", "3", "--batch_size", "2", "--max_length", "64", "--sample_tokens", "0", "--eval_interval", "-1",
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
                           "--batch_size", "1", "--max_length", "32", "--sample_tokens", "0", "--eval_interval", "-1")
    assert "lora: continuing" in text
    from safetensors.torch import load_file
    theirs = load_file(tmp_path / "peft_adapter" / "adapter_model.safetensors")
    ours = load_file(tmp_path / "cont" / "adapter" / "adapter_model.safetensors")
    assert sorted(theirs) == sorted(ours)
    for k in theirs:
        assert (theirs[k] - ours[k]).abs().max().item() < 1e-6, k


def test_the_server_serves_several_peft_adapters_at_once_with_pefts_output(base, tmp_path):
    """infer_llama --serve --lora a=DIR b=DIR: requests name the base or an adapter as their
    "model", are batched together (sent at once), and each gets PEFT's greedy text for its
    adapter; /v1/models lists the adapters; an unknown name is a 404 naming what is served."""
    import concurrent.futures
    import openai
    from peft import LoraConfig, get_peft_model
    from transformers import AutoTokenizer, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(base)
    peft_models = {}
    for name, seed, targets in [("a", 5, ["q_proj", "v_proj"]), ("b", 6, ["k_proj", "o_proj", "gate_proj", "up_proj",
                                                                           "down_proj"])]:
        torch.manual_seed(seed)
        m = get_peft_model(LlamaForCausalLM.from_pretrained(base), LoraConfig(r=4, lora_alpha=8, target_modules=targets))
        with torch.no_grad():
            for n, p in m.named_parameters():
                if "lora_B" in n:
                    p.normal_(0, 0.3)
        m.save_pretrained(tmp_path / name)
        peft_models[name] = m.eval()
    peft_models["base"] = LlamaForCausalLM.from_pretrained(base).eval()
    prompts = ["It is a truth", "Emma Woodhouse, handsome"]

    def peft_text(name, prompt):
        ids = tok(prompt, return_tensors="pt").input_ids
        with torch.no_grad():
            out = peft_models[name].generate(ids, max_new_tokens=10, do_sample=False)[0, ids.shape[1]:].tolist()
        return tok.decode([t for t in out if t != tok.eos_token_id])

    want = {(n, p): peft_text(n, p) for n in peft_models for p in prompts}
    assert len({want[(n, prompts[0])] for n in peft_models}) == 3  # each adapter changes the output
    flags = ["--served_model_name", "base", "--lora", f"a={tmp_path / 'a'}", f"b={tmp_path / 'b'}"]
    url, proc = start_server(base, *flags)
    try:
        c = client(url)
        assert [m.id for m in c.models.list().data] == ["base", "a", "b"]

        def ask(key):
            r = c.completions.create(model=key[0], prompt=key[1], max_tokens=10, temperature=0)
            return r.model, r.choices[0].text

        with concurrent.futures.ThreadPoolExecutor(len(want)) as pool:
            got = dict(zip(want, pool.map(ask, want)))
        for key, (model, text) in got.items():
            assert model == key[0] and text == want[key], key
        with pytest.raises(openai.NotFoundError, match="does not exist .*'base', 'a', 'b'"):
            c.completions.create(model="c", prompt="x", max_tokens=1)
    finally:
        proc.kill()
    # Tensor parallel: each rank keeps its slices of the adapters (column layers B's rows, row
    # layers A's columns) and the answers are the same.
    port = free_port()
    proc = subprocess.Popen([f"{APPS}/colossal", "run", "--nproc_per_node", "2", "--", f"{APPS}/infer_llama",
                             "--serve", "--tp", "2", "--model", str(base), "--port", str(port), "--threads", "1",
                             "--shutdown_grace", "1", *flags], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        c = client(f"http://127.0.0.1:{port}")
        for _ in range(600):
            try:
                c.models.list()
                break
            except openai.APIConnectionError:
                assert proc.poll() is None, proc.stdout.read()
                time.sleep(0.1)
        with concurrent.futures.ThreadPoolExecutor(len(want)) as pool:
            got = dict(zip(want, pool.map(ask, want)))
        assert {k: t for k, (_, t) in got.items()} == want
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    # Named adapters need a server; a prompt on the command line is refused, naming --lora DIR.
    r = subprocess.run([f"{APPS}/infer_llama", "--model", str(base), "--prompt", "x", "--lora", f"a={tmp_path / 'a'}"],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "named adapters are served per request (--serve)" in r.stderr, r.stderr


GEMINI_OFFLOAD = ["--plugin", "gemini", "--offload_optim_frac", "1", "--offload_param_frac", "1",
                  "--offload_device", "nvme", "--nvme_dir", "NVME"]


@pytest.mark.parametrize("layout", [["--plugin", "ddp"], ["--plugin", "zero1"], ["--plugin", "zero2"],
                                    ["--plugin", "gemini"], GEMINI_OFFLOAD, ["--plugin", "hybrid", "--tp", "2"],
                                    ["--plugin", "zero2", "--grad_checkpoint"],
                                    ["--plugin", "hybrid", "--pp", "2", "--num_microbatches", "2"]])
def test_lora_under_each_layout_follows_one_process(layout, tmp_path):
    """colossal verify on train_llama's default model: losses, adapter gradients and parameters
    (the frozen ones included: unchanged) against one process. Gemini with offload keeps the
    adapters' chunks and their optimizer state in NVMe files."""
    (tmp_path / "nvme").mkdir()
    layout = [str(tmp_path / "nvme") if f == "NVME" else f for f in layout]
    cmd = [f"{APPS}/colossal", "verify", "--nproc_per_node", "2", "--steps", "2", "--", f"{APPS}/train_llama",
           "--lora_rank", "4", "--lora_init", "gaussian", "--output", str(tmp_path / "run"), *COMMON[:-2], *layout]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "PASS: the layout matches one process" in out, out
    assert "lora_A.weight" in out or "lora_B.weight" in out, out  # the adapters are what was compared


@pytest.mark.parametrize("layout", [["--plugin", "ddp"], ["--plugin", "zero2"], ["--plugin", "gemini"],
                                    ["--plugin", "hybrid", "--tp", "2"],
                                    ["--plugin", "hybrid", "--pp", "2", "--num_microbatches", "2"]])
def test_qlora_under_each_layout_follows_one_process(layout, tmp_path):
    """colossal verify of an nf4 QLoRA run: under tp each rank keeps its part of the whole matrix's
    quantization (blocks, absmax and the double quantization's mean and scales as one process has
    them), so tp 2 equals one process as the other layouts do. The shapes put every split on a
    64-element block boundary (hidden 128, intermediate 256)."""
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 4000, "hidden_size": 128,
              "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
              "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 10000.0}
    (tmp_path / "config.json").write_text(json.dumps(config))
    cmd = [f"{APPS}/colossal", "verify", "--nproc_per_node", "2", "--steps", "2", "--", f"{APPS}/train_llama",
           "--model_config", str(tmp_path / "config.json"), "--lora_rank", "4", "--lora_init", "gaussian",
           "--quantize_base", "nf4", "--output", str(tmp_path / "run"), *COMMON[:-2], *layout]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "PASS: the layout matches one process" in out, out
    assert "qlora: 14 base layers in nf4" in out and "quantizes its slice alone" not in out, out


@pytest.mark.parametrize("quantize", [[], ["--quantize_base", "nf4"]])
def test_lora_on_experts_under_ep_2_follows_one_process(quantize, tmp_path):
    """A Mixtral: adapters on attention, the router and every expert (each ep rank holds its
    experts' adapters), under --ep 2 against one process; with QLoRA the experts' bases are
    quantized too."""
    config = {"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 64, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64, "vocab_size": 600,
              "num_local_experts": 4, "num_experts_per_tok": 2, "router_aux_loss_coef": 0}
    (tmp_path / "config.json").write_text(json.dumps(config))
    cmd = [f"{APPS}/colossal", "verify", "--nproc_per_node", "2", "--steps", "2", "--", f"{APPS}/train_llama",
           "--model_config", str(tmp_path / "config.json"), "--vocab_size", "600", "--lora_rank", "4",
           "--lora_init", "gaussian", "--output", str(tmp_path / "run"), *COMMON[:-2], "--plugin", "hybrid", "--ep", "2",
           *quantize]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out
    assert "PASS: the layout matches one process" in out, out
    assert "experts.2.w3.lora_B.weight" in out or "block_sparse_moe.experts" in out, out
    if quantize:
        assert "qlora: 22 base layers in nf4" in out, out  # attention, router and experts.


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


# ---- QLoRA: the quantized base against bitsandbytes, and a QLoRA run against LoRA on its values

def test_nf4_is_bitsandbytes_format():
    """Our NF4 levels and absmax map are bitsandbytes'; the 4-bit codes of a weight are the ones
    quantize_4bit writes; bitsandbytes' stored state (codes, 8-bit absmax, second-level scales,
    offset) reads here to its own dequantize_4bit bit for bit. bitsandbytes' CPU quantizer of the
    absmax (a binary search) lands one code away from the nearest on a few blocks; ours takes the
    nearest (its Python reference's rule), so only those absmax codes may differ, by one."""
    import bitsandbytes.functional as F
    from bitsandbytes.backends.utils import _NF4_QUANT_TABLE
    from colossal import _C
    P = _C.peft
    assert torch.equal(P.nf4_levels(), _NF4_QUANT_TABLE.cpu())
    assert torch.equal(P.dynamic_map(), F.create_dynamic_map(signed=True))
    torch.manual_seed(0)
    for shape in [(96, 4096), (40, 200), (7, 33)]:
        w = torch.randn(shape) * 0.02
        q, state = F.quantize_4bit(w, blocksize=64, quant_type="nf4", compress_statistics=True)
        ours = P.quantize(w, "nf4")
        assert torch.equal(ours.codes, q.reshape(-1)), shape
        assert ours.absmax_offset == state.offset.item(), shape
        assert torch.equal(ours.absmax_scales, state.state2.absmax), shape
        step = (ours.absmax_codes.int() - state.absmax.int()).abs()
        assert step.max().item() <= 1 and (step > 0).float().mean().item() < 0.01, shape
        theirs = P.nf4_from_parts(*shape, q.reshape(-1), state.absmax, state.state2.absmax, state.offset.item())
        assert torch.equal(theirs.dequantize(), F.dequantize_4bit(q, state)), shape
        # Round trip: every value within half a level gap (at most 0.16 of its block's absmax) plus
        # the 8-bit absmax's error.
        assert (ours.dequantize() - w).abs().max().item() <= 0.17 * w.abs().max().item()
    assert P.quantize(torch.randn(64, 64), "nf4").bytes == 64 * 64 // 2 + 64 + 4


def _losses(log):
    return [json.loads(line)["loss"] for line in log.read_text().splitlines() if '"loss"' in line and '"event"' not in line]


LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


@pytest.mark.parametrize("fmt", ["nf4", "int4"])
def test_qlora_follows_lora_on_the_dequantized_base_and_merges_into_the_original(base, fmt, tmp_path):
    """train_llama --quantize_base: the same losses and adapter as a LoRA run whose base is our
    dequantized weights (1e-5), and --merge_lora folds the adapter into the original full-precision
    weights (PEFT's merge_and_unload of the adapter on the original base, 1e-5)."""
    from peft import PeftModel
    from safetensors.torch import load_file, save_file
    from transformers import LlamaForCausalLM
    from colossal import _C
    import shutil

    deq = tmp_path / "dequantized"
    shutil.copytree(base, deq)
    state = load_file(base / "model.safetensors")
    for name in list(state):
        if any(f".{leaf}.weight" in name for leaf in LINEARS):
            state[name] = _C.peft.quantize(state[name], fmt).dequantize().to(state[name].dtype)
    save_file(state, deq / "model.safetensors", metadata={"format": "pt"})
    flags = ["--lora_rank", "4", "--lora_alpha", "8", "--lora_init", "gaussian", "--log_interval", "1", *COMMON]
    _, text = colossal_run(1, f"{APPS}/train_llama", "--pretrained", base, "--output", tmp_path / "q",
                           "--quantize_base", fmt, "--merge_lora", "--log_file", tmp_path / "q.jsonl", *flags)
    assert f"qlora: 14 base layers in {fmt}" in text, text
    colossal_run(1, f"{APPS}/train_llama", "--pretrained", deq, "--output", tmp_path / "l",
                 "--log_file", tmp_path / "l.jsonl", *flags)
    q_losses, l_losses = _losses(tmp_path / "q.jsonl"), _losses(tmp_path / "l.jsonl")
    assert len(q_losses) == 3 and q_losses == pytest.approx(l_losses, rel=1e-5)
    qa = load_file(tmp_path / "q" / "adapter" / "adapter_model.safetensors")
    la = load_file(tmp_path / "l" / "adapter" / "adapter_model.safetensors")
    assert sorted(qa) == sorted(la)
    for k in qa:
        assert (qa[k] - la[k]).abs().max().item() <= 1e-5 * la[k].abs().max().item() + 1e-7, k
    merged = LlamaForCausalLM.from_pretrained(tmp_path / "q" / "model")
    want = PeftModel.from_pretrained(LlamaForCausalLM.from_pretrained(base), tmp_path / "q" / "adapter").merge_and_unload()
    mine = dict(merged.named_parameters())
    assert max((p - mine[n]).abs().max().item() for n, p in want.named_parameters()) < 1e-5


def test_lora_checkpoints_hold_only_the_adapters_and_resume(base, tmp_path):
    """A LoRA run's checkpoint: the adapters (and their optimizer state, the data position), not
    the frozen base; resuming from it continues the run (the resumed steps equal an unbroken run's)."""
    from safetensors import safe_open
    flags = ["--pretrained", base, "--lora_rank", "4", "--lora_init", "gaussian", "--log_interval", "1",
             "--max_length", "64", "--batch_size", "2", "--sample_tokens", "0", "--eval_interval", "-1", "--lr", "5e-3"]
    colossal_run(1, f"{APPS}/train_llama", "--output", tmp_path / "whole", "--max_steps", "4", "--save_interval", "2",
                 "--keep_checkpoints", "0", "--log_file", tmp_path / "whole.jsonl", *flags)
    step = next((tmp_path / "whole").rglob("step-2"))
    names = []
    for f in (step / "model").glob("*.safetensors"):
        with safe_open(f, "pt") as s:
            names += list(s.keys())
    assert names and all(".lora_A." in n or ".lora_B." in n for n in names), names
    assert json.loads((step / "state.json").read_text())["model_contents"] == "trainable"
    size = sum(f.stat().st_size for f in (step / "model").glob("*.safetensors"))
    assert size < (base / "model.safetensors").stat().st_size / 5
    colossal_run(1, f"{APPS}/train_llama", "--output", tmp_path / "resumed", "--max_steps", "4",
                 "--load_checkpoint", str(step), "--log_file", tmp_path / "resumed.jsonl", *flags)
    assert _losses(tmp_path / "resumed.jsonl") == pytest.approx(_losses(tmp_path / "whole.jsonl")[2:], rel=1e-5)


def test_colossal_merge_equals_pefts_merge_and_names_a_wrong_base(base, tmp_path):
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaForCausalLM
    torch.manual_seed(3)
    model = get_peft_model(LlamaForCausalLM.from_pretrained(base),
                           LoraConfig(r=4, lora_alpha=16, target_modules=["q_proj", "down_proj"], init_lora_weights=False))
    model.save_pretrained(tmp_path / "adapter")
    r = subprocess.run([f"{APPS}/colossal", "merge", "--model", str(base), "--adapter", str(tmp_path / "adapter"),
                        "--output", str(tmp_path / "merged")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "merged" / "tokenizer.json").exists() and (tmp_path / "merged" / "config.json").exists()
    want = model.merge_and_unload()
    mine = dict(LlamaForCausalLM.from_pretrained(tmp_path / "merged").named_parameters())
    assert max((p - mine[n]).abs().max().item() for n, p in want.named_parameters()) < 1e-5
    # A base without the adapted layers' shapes: named, nothing written.
    from transformers import LlamaConfig
    other = LlamaConfig.from_pretrained(base)
    other.intermediate_size = 128
    LlamaForCausalLM(other).save_pretrained(tmp_path / "other")
    r = subprocess.run([f"{APPS}/colossal", "merge", "--model", str(tmp_path / "other"), "--adapter",
                        str(tmp_path / "adapter"), "--output", str(tmp_path / "bad")], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode != 0
    assert "mlp.down_proj.lora_A.weight is [4, 96] but model.layers.0.mlp.down_proj.weight" in r.stdout + r.stderr, \
        r.stdout + r.stderr
