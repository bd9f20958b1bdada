"""Decoder families as transformers builds them: for each family a random-weight model saved by
transformers loads here with its logits (a right-padded batch, fp32, within 1e-4), infer_llama's
greedy text equals generate's, and the directory we save loads back in transformers as the same
family with the same logits. Fields a family does not support are refused by name."""
import json
import os
import subprocess

import pytest
import torch

APPS = os.environ.get("COLOSSAL_APPS", "")
TEXT = ("It is a truth universally acknowledged, that a single man in possession of a good fortune, must be in want "
        "of a wife. Emma Woodhouse, handsome, clever, and rich, with a comfortable home and happy disposition.")
SHAPE = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             max_position_embeddings=256, rope_theta=10000.0, initializer_range=0.3)


def family_config(name, vocab, bos, eos):
    import transformers as tf
    common = dict(vocab_size=vocab, bos_token_id=bos, eos_token_id=eos, **SHAPE)
    if name == "llama":
        return tf.LlamaConfig(attention_bias=True, **common)
    if name == "mistral":
        return tf.MistralConfig(sliding_window=None, head_dim=16, **common)
    if name == "mistral_window":  # a window shorter than the batch and than prompt + reply
        return tf.MistralConfig(sliding_window=6, head_dim=16, **common)
    if name == "qwen2":
        return tf.Qwen2Config(**common)
    if name == "qwen2_tied":  # the small Qwen2.5 models share the embedding with the head
        return tf.Qwen2Config(tie_word_embeddings=True, **common)
    if name == "qwen3":  # head_dim given and different from hidden / heads, as Qwen3 writes it
        return tf.Qwen3Config(head_dim=32, **common)
    if name == "qwen3_bias":
        return tf.Qwen3Config(head_dim=24, attention_bias=True, **common)
    if name == "gemma":  # GeGLU (tanh), (1 + w) norms, scaled embeddings, a tied head
        return tf.GemmaConfig(head_dim=32, **common)
    if name == "gemma2":
        # Gemma 2's shape at small size: head_dim 256, an attention scale of its own (27B's
        # 144), windowed layers alternating with global ones (a window shorter than the batch),
        # and caps low enough that tanh bends the scores and the logits.
        return tf.Gemma2Config(head_dim=256, query_pre_attn_scalar=144, sliding_window=6,
                               attn_logit_softcapping=3.0, final_logit_softcapping=2.0, **common)
    if name == "gpt2":  # learned positions, LayerNorm with biases, Conv1D c_attn, a plain GELU MLP, tied head
        return tf.GPT2Config(vocab_size=vocab, bos_token_id=bos, eos_token_id=eos, n_embd=64, n_layer=2, n_head=4,
                             n_inner=96, n_positions=256, initializer_range=0.3)
    raise ValueError(name)


FAMILIES = ["llama", "mistral", "mistral_window", "qwen2", "qwen2_tied", "qwen3", "qwen3_bias", "gemma", "gemma2", "gpt2"]


@pytest.fixture(scope="module")
def tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([TEXT] * 10, trainers.BpeTrainer(
        # <|endoftext|>: transformers reads a qwen2 directory with Qwen2Tokenizer, which adds it if missing
        vocab_size=300, special_tokens=["<s>", "</s>", "<pad>", "<|endoftext|>"], initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False))
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")


def build_family(name, tokenizer, d):
    """A random-weight model of the family saved by transformers (with the tokenizer) in `d`."""
    from transformers import AutoModelForCausalLM

    config = family_config(name, len(tokenizer), tokenizer.bos_token_id, tokenizer.eos_token_id)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():  # biases and norms away from their initial values, so each one matters
        for pname, p in model.named_parameters():
            if pname.endswith("bias"):
                p.normal_(0, 0.3)
            elif "norm" in pname or ".ln_" in pname:
                p.normal_(1, 0.3)
    model.save_pretrained(d)
    tokenizer.save_pretrained(d)
    return model


@pytest.fixture(scope="module", params=FAMILIES)
def family_dir(request, tokenizer, tmp_path_factory):
    d = tmp_path_factory.mktemp(request.param)
    return request.param, d, build_family(request.param, tokenizer, d)


def tolerance(logits):
    """1e-4, or relative 1e-5 of the largest logit past 10: Gemma's scaled embeddings make logits
    of ~20, where fp32 alone (transformers' own fp32 against fp64) is 1.2e-4 off."""
    return 1e-5 * max(10.0, logits.abs().max().item())


def padded_batch(tokenizer):
    enc = tokenizer([TEXT[:70], TEXT[:31]], return_tensors="pt", padding=True)  # right padding
    assert enc.attention_mask[1].sum() < enc.attention_mask.shape[1]
    return enc.input_ids, enc.attention_mask


def test_logits_equal_transformers_on_a_padded_batch(family_dir, tokenizer):
    import colossal

    name, d, model = family_dir
    ids, mask = padded_batch(tokenizer)
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask).logits
    ours = colossal.llama.AutoModelForCausalLM.from_pretrained(d)
    assert ours.config["model_type"] == json.loads((d / "config.json").read_text())["model_type"]
    with torch.no_grad():
        got = ours(ids)
    keep = mask.bool()
    diff = (got[keep] - want[keep]).abs().max().item()
    assert diff < tolerance(want), f"{name}: max logit difference {diff}"


def test_greedy_tokens_equal_generate(family_dir, tokenizer):
    import colossal

    name, d, model = family_dir
    prompt = "It is a truth universally"
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=20, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    want = out[0, ids.shape[1]:].tolist()
    if want[-1] == tokenizer.eos_token_id:
        want = want[:-1]  # ours reports the text before the end-of-sequence token
    got = colossal.llama.generate(d, prompt, max_new_tokens=20, temperature=0, repetition_penalty=1.0,
                                  return_tokens=True)
    assert got["tokens"][:len(want)] == want, name
    # int8 runs the same blocks quantized (its tokens may part from fp32's), through the CLI.
    cli = subprocess.run([f"{APPS}/infer_llama", "--model", str(d), "--prompt", prompt, "--temperature", "0",
                          "--max_new_tokens", "8", "--dtype", "int8"], capture_output=True)
    assert cli.returncode == 0, cli.stderr
    assert cli.stdout.startswith(prompt.encode()), cli.stdout


def test_our_directory_loads_back_in_transformers(family_dir, tokenizer, tmp_path):
    import colossal
    from transformers import AutoModelForCausalLM

    name, d, model = family_dir
    ours = colossal.llama.AutoModelForCausalLM.from_pretrained(d)
    ours.save_pretrained(tmp_path / "ours")
    back = AutoModelForCausalLM.from_pretrained(tmp_path / "ours", dtype=torch.float32).eval()
    assert type(back) is type(model), f"{name}: {type(back).__name__} instead of {type(model).__name__}"
    ids, _ = padded_batch(tokenizer)
    with torch.no_grad():
        want = back(ids).logits
        diff = (want - ours(ids)).abs().max().item()
    assert diff < tolerance(want), f"{name}: max logit difference {diff}"


@pytest.mark.parametrize("name", ["llama", "qwen2_tied", "qwen3_bias", "gpt2"])
def test_gguf_from_llama_cpps_converter_gives_the_directorys_tokens(name, tokenizer, tmp_path):
    """llama.cpp's own convert_hf_to_gguf.py on the family's directory (f32): the file gives the
    directory's greedy tokens (LLaMA's interleaved q/k rows and biases put back; Qwen's kept;
    Qwen3's q/k norms read; GPT-2's fused attn_qkv, position table, LayerNorm and MLP biases, and
    an MLP width taken from the tensors, since the converter writes 4 x n_embd whatever n_inner is)."""
    import sys
    import colossal

    d = tmp_path / name
    model = build_family(name, tokenizer, d)
    here = os.path.dirname(os.path.abspath(__file__))
    src = subprocess.run(["bash", os.path.join(here, "..", "..", "scripts", "build_llama_cpp.sh"), "--root"],
                         capture_output=True, text=True, check=True).stdout.strip()
    if name == "gpt2":  # the converter reads n_ctx, which GPT-2's published config.json has and transformers 5 omits
        config = json.loads((d / "config.json").read_text())
        config["n_ctx"] = config["n_positions"]
        (d / "config.json").write_text(json.dumps(config))
    gguf_path = tmp_path / f"{name}.gguf"
    done = subprocess.run([sys.executable, os.path.join(here, "..", "llama", "convert_with_llama_cpp.py"), src, str(d),
                           str(gguf_path), "--pre", "gpt-2"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    import gguf
    arch = gguf.GGUFReader(str(gguf_path)).fields["general.architecture"].contents()
    assert arch == {"llama": "llama", "qwen2_tied": "qwen2", "qwen3_bias": "qwen3", "gpt2": "gpt2"}[name]
    prompt = "It is a truth universally"
    ids = tokenizer(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=16, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    want = out[0, ids.shape[1]:].tolist()
    if want[-1] == tokenizer.eos_token_id:
        want = want[:-1]
    for source in (d, gguf_path):
        got = colossal.llama.generate(source, prompt, max_new_tokens=16, temperature=0, repetition_penalty=1.0,
                                      return_tokens=True, dtype="fp32")
        assert got["tokens"][:len(want)] == want, (name, str(source))


@pytest.mark.parametrize("family, change, message", [
    ("qwen2", {"model_type": "qwen3_moe"}, "model_type \"qwen3_moe\": mixtures of experts with shared experts "
                                           "(Qwen-MoE) are not supported"),
    ("qwen2", {"use_sliding_window": True}, "qwen2: use_sliding_window true is not supported"),
    ("qwen2", {"layer_types": ["full_attention", "sliding_attention"]}, "qwen2: layer_types[1] is \"sliding_attention\""),
    ("qwen2", {"hidden_act": "relu"}, "qwen2: hidden_act is \"relu\""),
    ("gemma2", {"hidden_activation": "relu"}, "gemma2: hidden_activation is \"relu\""),
    ("gemma2", {"use_bidirectional_attention": True}, "gemma2: use_bidirectional_attention true is not supported"),
    ("gemma2", {"attn_logit_softcapping": -1}, "field 'attn_logit_softcapping' expected a positive number or null"),
    ("gemma", {"layer_types": ["sliding_attention", "full_attention"]}, "gemma: layer_types[0] is \"sliding_attention\""),
    ("gpt2", {"scale_attn_by_inverse_layer_idx": True}, "gpt2: scale_attn_by_inverse_layer_idx true is not supported"),
    ("gpt2", {"add_cross_attention": True}, "gpt2: add_cross_attention true is not supported"),
    ("gpt2", {"activation_function": "relu"}, "gpt2: activation_function is \"relu\""),
])
def test_unsupported_fields_are_named(tokenizer, tmp_path, family, change, message):
    import colossal

    config = json.loads(family_config(family, len(tokenizer), 0, 1).to_json_string())
    config.update(change)
    with pytest.raises(Exception) as e:
        colossal.llama.AutoModelForCausalLM.from_config(config)
    assert message in str(e.value)
