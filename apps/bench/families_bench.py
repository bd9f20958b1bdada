"""Each decoder family beside LLaMA of the same size, trained with train_llama and served with
infer_llama on this machine, and BERT fine-tuning beside transformers' own BertForSequenceClassification.

For every family a random-weight model is built and saved by transformers (hidden 512, 8 layers,
8 heads, its own MLP: SwiGLU 1536 wide, or GELU 2048 wide for GPT-2, about the same parameters),
with a byte-level BPE tokenizer trained on the Austen corpus. Then, one after the other:
  train   train_llama --pretrained DIR on the built-in corpus, 2 ranks (DDP), 256-token samples,
          batch 4 per rank: the median tokens/s of the logged windows after the first
  decode  infer_llama --model DIR, fp32 and int8, one prompt, 128 greedy tokens: tokens/s
  (the end-of-sequence row of each head is zeroed so no model stops early)
and BERT (train_bert --model base shape cut to 4 layers, or --bert_shape): train_bert texts/s
on 2 ranks against transformers' BertForSequenceClassification trained with torch.optim.AdamW in
one process of 2 threads, eager and under torch.compile, on the same texts and lengths.

    python apps/bench/families_bench.py --apps build/apps [--families llama,gpt2] [--skip_bert]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import torch

SHAPE = dict(hidden_size=512, intermediate_size=1536, num_hidden_layers=8, num_attention_heads=8,
             num_key_value_heads=4, max_position_embeddings=1024, rope_theta=10000.0)


def corpus_text(apps, work, limit=2_000_000):
    """The built-in Austen corpus as train_llama writes it (one step of its default job)."""
    out = os.path.join(work, "corpus")
    run([f"{apps}/train_llama", "--output", out, "--max_steps", "1", "--sample_tokens", "0", "--eval_interval", "0"])
    with open(os.path.join(out, "data", "train.jsonl")) as f:
        return "\n".join(json.loads(line)["text"] for line in f)[:limit]


def tokenizer(text):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(text.split("\n"), trainers.BpeTrainer(
        vocab_size=8000, special_tokens=["<s>", "</s>", "<pad>", "<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>")


def config(name, tok):
    import transformers as tf
    common = dict(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, **SHAPE)
    if name == "llama":
        return tf.LlamaConfig(**common)
    if name == "mistral":
        return tf.MistralConfig(sliding_window=128, **common)
    if name == "qwen2":
        return tf.Qwen2Config(tie_word_embeddings=True, **common)
    if name == "qwen3":
        return tf.Qwen3Config(head_dim=64, **common)
    if name == "gemma2":
        return tf.Gemma2Config(head_dim=64, query_pre_attn_scalar=64, sliding_window=128, **common)
    if name == "gpt2":
        return tf.GPT2Config(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                             n_embd=512, n_layer=8, n_head=8, n_inner=2048, n_positions=1024)
    raise ValueError(name)


def build(name, tok, d):
    from transformers import AutoModelForCausalLM
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config(name, tok))
    with torch.no_grad():  # no early stop: the end-of-sequence logit is 0 whatever the state
        model.get_output_embeddings().weight[tok.eos_token_id].zero_()
    model.save_pretrained(d)
    tok.save_pretrained(d)
    return sum(p.numel() for p in model.parameters())


def run(cmd, timeout=1800):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout)
    out = r.stdout + r.stderr
    if r.returncode != 0:
        sys.exit(f"{' '.join(map(str, cmd))} failed:\n{out[-3000:]}")
    return out


def train_tokens_per_s(apps, d, work):
    out = run([f"{apps}/colossal", "run", "--nproc_per_node", "2", "--", f"{apps}/train_llama", "--pretrained", d,
               "--output", work, "--max_steps", "16", "--batch_size", "4", "--max_length", "256", "--log_interval",
               "4", "--eval_interval", "0", "--sample_tokens", "0", "--save_interval", "1000"])
    rates = [float(x) for x in re.findall(r"tokens/s ([0-9.]+)", out)]
    return statistics.median(rates[1:]) if len(rates) > 1 else float("nan")


def decode_tokens_per_s(apps, d, dtype):
    out = run([f"{apps}/infer_llama", "--model", d, "--prompt", "It is a truth universally acknowledged",
               "--max_new_tokens", "128", "--temperature", "0", "--dtype", dtype])
    m = re.search(r"generated in [0-9.]+ s \(([0-9.]+) tokens/s\)", out)
    return float(m.group(1)) if m else float("nan")


def bert_rows(apps, work, layers, threads):
    """train_bert on 2 ranks against transformers in one process, same shape and data."""
    import transformers as tf
    d = os.path.join(work, "bert_run")
    steps = 30
    cmd = [f"{apps}/colossal", "run", "--nproc_per_node", "2", "--", f"{apps}/train_bert", "--model", "base",
           "--max_steps", str(steps), "--log_interval", "10", "--eval_interval", str(steps), "--save_dir", d,
           "--batch_size", "8"]
    cfg_path = os.path.join(work, "bert_config.json")
    cfg = tf.BertConfig(vocab_size=8000, num_hidden_layers=layers, hidden_size=768, num_attention_heads=12,
                        intermediate_size=3072, num_labels=6)
    with open(cfg_path, "w") as f:
        f.write(cfg.to_json_string())
    cmd[cmd.index("base")] = cfg_path
    out = run(cmd)
    rates = [float(x) for x in re.findall(r"texts/s ([0-9.]+)", out)]
    ours = statistics.median(rates[1:]) if len(rates) > 1 else float("nan")
    # transformers on the same shape: 16 texts of 90 tokens a step (2 ranks x 8), 2 threads.
    torch.set_num_threads(threads)
    rows = [("colossal-cpp train_bert, DDP 2 ranks x 1 thread", ours)]
    for compiled in (False, True):
        torch.manual_seed(0)
        model = tf.BertForSequenceClassification(cfg).train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
        step_fn = torch.compile(model) if compiled else model
        ids = torch.randint(5, 8000, (16, 90))
        labels = torch.randint(0, 6, (16,))
        times = []
        for i in range(8):
            t0 = time.perf_counter()
            loss = step_fn(input_ids=ids, attention_mask=torch.ones_like(ids), labels=labels).loss
            loss.backward()
            opt.step()
            opt.zero_grad()
            times.append(time.perf_counter() - t0)
        rows.append((f"transformers BertForSequenceClassification{' + torch.compile' if compiled else ''}, "
                     f"1 process x {threads} threads", 16 / statistics.median(times[3:])))
    return rows


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--apps", default="build/apps")
    p.add_argument("--families", default="llama,mistral,qwen2,qwen3,gemma2,gpt2")
    p.add_argument("--skip_bert", action="store_true")
    p.add_argument("--skip_families", action="store_true")
    p.add_argument("--bert_layers", type=int, default=4)
    args = p.parse_args()
    apps = os.path.abspath(args.apps)
    with tempfile.TemporaryDirectory() as work:
        if not args.skip_families:
            tok = tokenizer(corpus_text(apps, work))
            print("| family | parameters | train tokens/s (2 ranks) | decode fp32 tokens/s | decode int8 tokens/s |")
            print("| --- | --- | --- | --- | --- |")
            for name in args.families.split(","):
                d = os.path.join(work, name)
                n = build(name, tok, d)
                train = train_tokens_per_s(apps, d, os.path.join(work, name + "_run"))
                fp32 = decode_tokens_per_s(apps, d, "fp32")
                int8 = decode_tokens_per_s(apps, d, "int8")
                print(f"| {name} | {n / 1e6:.1f}M | {train:.0f} | {fp32:.1f} | {int8:.1f} |", flush=True)
        if not args.skip_bert:
            print()
            print(f"| BERT ({args.bert_layers} layers, hidden 768, 90-token texts, batch 16) | texts/s |")
            print("| --- | --- |")
            for label, rate in bert_rows(apps, work, args.bert_layers, threads=2):
                print(f"| {label} | {rate:.1f} |", flush=True)


if __name__ == "__main__":
    main()
