"""Writes a LLaMA model directory (config.json, model.safetensors, tokenizer.model or
tokenizer.json) as a GGUF file with the `gguf` package from PyPI, the way llama.cpp's converter
lays it out: its tensor names, the query/key rows permuted for the interleaved rotary layout, the
SentencePiece vocabulary with scores and token types, or a byte-level BPE vocabulary as the
converter writes Llama 3's (model gpt2, pre llama-bpe, merges, control tokens, add_bos_token, the
chat template), every 2-d weight in TYPE (f32, f16, q8_0, q4_0, q4_1), the norms in f32.

K-quants (q2_k, q3_k, q4_k, q5_k, q6_k, and q4_k_m: Q4_K with Q6_K for the output, and for the
value and down projections of layer 0, as llama-quantize mixes them) test the reading of the
block layouts, not a quantizer: the `gguf` package has none for them, so each matrix gets random
blocks (random bits, scales d/dmin set to sizes that keep the weights near the model's) from a
seed of its name. TYPE:f32 (e.g. q4_k_m:f32) writes the reference for such a file: the same blocks
dequantized by the `gguf` package (llama.cpp's own Python reading), stored as F32.

    python write_gguf.py MODEL_DIR OUT.gguf TYPE
"""
import zlib
import json
import sys

import gguf
import numpy as np
import sentencepiece as spm
from safetensors.numpy import load_file


def permute(w, heads):
    # llama.cpp's LlamaModel.permute: rows (i, i + d/2) of each head become (2i, 2i + 1).
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def add_byte_level_vocabulary(w, model_dir):
    """A tokenizer.json byte-level BPE as llama.cpp's converter writes Llama 3's."""
    tj = json.load(open(f"{model_dir}/tokenizer.json", encoding="utf-8"))
    conf = json.load(open(f"{model_dir}/tokenizer_config.json", encoding="utf-8"))
    vocab = dict(tj["model"]["vocab"])
    special = {}
    for t in tj.get("added_tokens", []):
        vocab[t["content"]] = t["id"]
        special[t["id"]] = t["special"]
    tokens = [None] * (max(vocab.values()) + 1)
    for tok, i in vocab.items():
        tokens[i] = tok
    types = [3 if special.get(i) else 4 if i in special else 1 for i in range(len(tokens))]
    merges = [m if isinstance(m, str) else " ".join(m) for m in tj["model"]["merges"]]
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("llama-bpe")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(vocab[conf["bos_token"]])
    w.add_eos_token_id(vocab[conf["eos_token"]])
    w.add_add_bos_token(True)
    if conf.get("chat_template"):
        w.add_chat_template(conf["chat_template"])


def main(model_dir, out, kind):
    cfg = json.load(open(f"{model_dir}/config.json"))
    weights = {}
    import glob
    for f in sorted(glob.glob(f"{model_dir}/model*.safetensors")):
        weights.update(load_file(f))
    heads, kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads

    w = gguf.GGUFWriter(out, "llama")
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(heads)
    w.add_head_count_kv(kv)
    w.add_rope_dimension_count(head_dim)
    # transformers 5 writes rope_theta inside rope_parameters.
    w.add_rope_freq_base(float(cfg.get("rope_theta") or (cfg.get("rope_parameters") or {}).get("rope_theta", 10000.0)))
    w.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-6)))

    import os
    if os.path.exists(f"{model_dir}/tokenizer.json") and not os.path.exists(f"{model_dir}/tokenizer.model"):
        add_byte_level_vocabulary(w, model_dir)
    else:
        sp = spm.SentencePieceProcessor(model_file=f"{model_dir}/tokenizer.model")
        tokens, scores, types = [], [], []
        for i in range(sp.vocab_size()):
            tokens.append(sp.id_to_piece(i).encode("utf-8"))
            scores.append(sp.get_score(i))
            types.append(2 if sp.is_unknown(i) else 3 if sp.is_control(i) else 6 if sp.is_byte(i)
                         else 5 if sp.is_unused(i) else 1)
        w.add_tokenizer_model("llama")
        w.add_token_list(tokens)
        w.add_token_scores(scores)
        w.add_token_types(types)
        w.add_bos_token_id(sp.bos_id())
        w.add_eos_token_id(sp.eos_id())
        w.add_unk_token_id(sp.unk_id())

    kind, _, reference = kind.partition(":")
    # Broken files for the loader's refusals: TYPE:nan puts a NaN in the first query weight (q8_0:
    # its block's scale becomes NaN), TYPE:misaligned states an alignment of 64 over offsets the
    # writer aligned to 32 (after a 12-byte tensor, so that some are 32 mod 64).
    if reference == "nan":
        weights["model.layers.0.self_attn.q_proj.weight"][0, 0] = float("nan")
    if reference == "misaligned":
        w.add_uint32("general.alignment", 64)
        w.add_tensor("pad", np.zeros(3, np.float32))  # 12 bytes: the next tensors start at 32 mod 64
    T = gguf.GGMLQuantizationType
    if kind in K_KINDS:
        return write_kquants(w, weights, cfg, heads, kv, kind, reference == "f32")
    qtype = {"f32": T.F32, "f16": T.F16, "q8_0": T.Q8_0, "q4_0": T.Q4_0,
             "q4_1": T.Q4_1}[kind]  # q4_1: a type the loader refuses

    def add(name, t, matrix=True):
        t = t.astype(np.float32)
        # Rows that are not whole 32-value blocks stay f32 (llama.cpp's converter falls back too).
        if not matrix or kind == "f32" or (kind not in ("f16",) and t.shape[-1] % 32 != 0):
            w.add_tensor(name, t)
        elif kind == "f16":
            w.add_tensor(name, t.astype(np.float16))
        else:
            w.add_tensor(name, gguf.quants.quantize(t, qtype), raw_dtype=qtype)

    add("token_embd.weight", weights["model.embed_tokens.weight"])
    for l in range(cfg["num_hidden_layers"]):
        p, g = f"model.layers.{l}.", f"blk.{l}."
        add(g + "attn_q.weight", permute(weights[p + "self_attn.q_proj.weight"], heads))
        add(g + "attn_k.weight", permute(weights[p + "self_attn.k_proj.weight"], kv))
        add(g + "attn_v.weight", weights[p + "self_attn.v_proj.weight"])
        add(g + "attn_output.weight", weights[p + "self_attn.o_proj.weight"])
        add(g + "ffn_gate.weight", weights[p + "mlp.gate_proj.weight"])
        add(g + "ffn_up.weight", weights[p + "mlp.up_proj.weight"])
        add(g + "ffn_down.weight", weights[p + "mlp.down_proj.weight"])
        add(g + "attn_norm.weight", weights[p + "input_layernorm.weight"], matrix=False)
        add(g + "ffn_norm.weight", weights[p + "post_attention_layernorm.weight"], matrix=False)
    add("output_norm.weight", weights["model.norm.weight"], matrix=False)
    if "lm_head.weight" in weights and not cfg.get("tie_word_embeddings", False):
        add("output.weight", weights["lm_head.weight"])

    finish(w)


def finish(w):
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


K_KINDS = ("q2_k", "q3_k", "q4_k", "q5_k", "q6_k", "q4_k_m")
# Byte offset and value of each fp16 scale (d, dmin) per type: sizes that keep |w| near 0.1-0.3.
K_SCALES = {"Q2_K": ((80, 0.02), (82, 0.015)), "Q3_K": ((108, 0.005),), "Q4_K": ((0, 0.001), (2, 0.004)),
            "Q5_K": ((0, 0.0005), (2, 0.004)), "Q6_K": ((208, 0.0002),)}


def random_blocks(name, rows, cols, qtype):
    """Random K-quant blocks for a [rows, cols] matrix, the same for the same name."""
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    data = rng.integers(0, 256, size=(rows, cols // block_elems, block_bytes), dtype=np.uint8)
    for offset, size in K_SCALES[qtype.name]:
        scale = (size * rng.uniform(0.5, 1.5, size=data.shape[:2])).astype(np.float16)
        data[:, :, offset:offset + 2] = scale.view(np.uint8).reshape(rows, -1, 2)
    return data.reshape(rows, -1)


def write_kquants(w, weights, cfg, heads, kv, kind, as_reference):
    T = gguf.GGMLQuantizationType
    main_type = T.Q4_K if kind == "q4_k_m" else getattr(T, kind.upper())

    def add(name, t, qtype=main_type):
        rows, cols = t.shape
        blocks = random_blocks(name, rows, cols, qtype)
        if as_reference:
            w.add_tensor(name, gguf.quants.dequantize(blocks, qtype).astype(np.float32).reshape(rows, cols))
        else:
            w.add_tensor(name, blocks, raw_dtype=qtype)

    mixed = T.Q6_K if kind == "q4_k_m" else main_type
    add("token_embd.weight", weights["model.embed_tokens.weight"])
    for l in range(cfg["num_hidden_layers"]):
        p, g = f"model.layers.{l}.", f"blk.{l}."
        add(g + "attn_q.weight", weights[p + "self_attn.q_proj.weight"])
        add(g + "attn_k.weight", weights[p + "self_attn.k_proj.weight"])
        add(g + "attn_v.weight", weights[p + "self_attn.v_proj.weight"], mixed if l == 0 else main_type)
        add(g + "attn_output.weight", weights[p + "self_attn.o_proj.weight"])
        add(g + "ffn_gate.weight", weights[p + "mlp.gate_proj.weight"])
        add(g + "ffn_up.weight", weights[p + "mlp.up_proj.weight"])
        add(g + "ffn_down.weight", weights[p + "mlp.down_proj.weight"], mixed if l == 0 else main_type)
        w.add_tensor(g + "attn_norm.weight", weights[p + "input_layernorm.weight"].astype(np.float32))
        w.add_tensor(g + "ffn_norm.weight", weights[p + "post_attention_layernorm.weight"].astype(np.float32))
    w.add_tensor("output_norm.weight", weights["model.norm.weight"].astype(np.float32))
    if "lm_head.weight" in weights and not cfg.get("tie_word_embeddings", False):
        add("output.weight", weights["lm_head.weight"], mixed)
    finish(w)


if __name__ == "__main__":
    main(*sys.argv[1:4])
