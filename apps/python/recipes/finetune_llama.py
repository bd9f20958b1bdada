"""Fine-tune a LLaMA model directory on your own JSONL, with the data pipeline in Python.

    colossal run --nproc_per_node 2 python apps/python/recipes/finetune_llama.py \
        --model_dir out/llama/model --data my.jsonl --plugin zero2 --steps 100

The model is the C++ LlamaForCausalLM (a Hugging Face directory: config.json, safetensors,
tokenizer.model); the data is plain Python: JSONL records ({"text": ...}, or {"source": ...,
"target": ...} joined by a space), tokenized, concatenated and cut into blocks of --block_size
tokens (the `datasets` run_clm way: every sample is full, so no token is padding), shuffled by
torch's DistributedSampler. The Booster runs the plugin underneath. The result is a Hugging Face
directory that `transformers`, infer_llama and colossal.llama.generate open.

--global_batch_size is split over the data-parallel ranks, so one process and two train the same
steps on the same samples: their losses and weights agree (tests/python/test_recipes.py checks).
"""
import argparse
import json
import math
import os
import time

import torch
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.distributed import DistributedSampler

import colossal


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model_dir", default="out/llama/model", help="Hugging Face directory to start from")
    p.add_argument("--data", default="out/llama/data/train.jsonl", help="JSONL records with 'text' (or source/target)")
    p.add_argument("--output", default="out/finetuned", help="the fine-tuned model directory")
    p.add_argument("--plugin", default="zero2", help="ddp | zero1 | zero2 | gemini")
    p.add_argument("--precision", default="fp32", help="fp32 | bf16 | fp16")
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--global_batch_size", type=int, default=8, help="samples per step over all ranks")
    p.add_argument("--block_size", type=int, default=128, help="tokens per sample")
    p.add_argument("--max_records", type=int, default=0, help="read at most this many records (0: all)")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--weight_decay", type=float, default=0.0)
    p.add_argument("--grad_clip", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--log_interval", type=int, default=10)
    return p.parse_args()


def read_jsonl(path, limit=0):
    """The records' text, one string per record; errors name the file and line."""
    texts = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                raise SystemExit(f"{path}:{number}: not JSON ({e.msg})")
            if "text" in record:
                texts.append(record["text"])
            elif "source" in record and "target" in record:
                texts.append(record["source"] + " " + record["target"])
            else:
                raise SystemExit(f"{path}:{number}: expected a 'text' field (or 'source' and 'target'), "
                                 f"found {sorted(record)}")
            if limit and len(texts) >= limit:
                break
    return texts


class PackedTokens(Dataset):
    """Every record tokenized (BOS ... EOS), concatenated, and cut into blocks of block_size."""

    def __init__(self, texts, tokenizer, block_size):
        stream = []
        for text in texts:
            stream.extend(tokenizer.encode(text, add_bos=True, add_eos=True))
        blocks = len(stream) // block_size
        if blocks == 0:
            raise SystemExit(f"the data has {len(stream)} tokens, fewer than one block of {block_size}")
        self.blocks = torch.tensor(stream[:blocks * block_size], dtype=torch.long).view(blocks, block_size)

    def __len__(self):
        return self.blocks.size(0)

    def __getitem__(self, i):
        return self.blocks[i]


def main():
    a = parse_args()
    rank, world = colossal.launch(seed=a.seed)
    if a.global_batch_size % world:
        raise SystemExit(f"--global_batch_size {a.global_batch_size} does not split over {world} ranks")
    for path, what in ((a.model_dir + "/config.json", "--model_dir"), (a.data, "--data")):
        if not os.path.exists(path):
            raise SystemExit(f"{what}: {path} does not exist (train one with `colossal run --nproc_per_node 2 -- "
                             "build/apps/train_llama`, or pass a Hugging Face directory and your JSONL)")

    tokenizer = colossal.llama.Tokenizer(a.model_dir + "/tokenizer.model")
    data = PackedTokens(read_jsonl(a.data, a.max_records), tokenizer, a.block_size)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=a.seed, drop_last=True)
    loader = DataLoader(data, batch_size=a.global_batch_size // world, sampler=sampler, drop_last=True)
    if len(loader) == 0:
        raise SystemExit(f"{len(data)} blocks make no batch of {a.global_batch_size}: lower --global_batch_size")

    model = colossal.llama.LlamaForCausalLM.from_pretrained(a.model_dir)
    optimizer = torch.optim.AdamW(model.parameters(), lr=a.lr, weight_decay=a.weight_decay)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 0.5 * (1 + math.cos(math.pi * s / a.steps)))
    booster = colossal.Booster(plugin=a.plugin, precision=a.precision)
    model, optimizer, _, _, scheduler = booster.boost(model, optimizer, lr_scheduler=scheduler)
    if rank == 0:
        print(f"fine-tuning {a.model_dir} on {len(data)} blocks of {a.block_size} tokens with {booster}, "
              f"{world} rank(s)", flush=True)

    model.train()
    step, epoch, t0 = 0, 0, time.time()
    while step < a.steps:
        sampler.set_epoch(epoch)
        for ids in loader:
            optimizer.zero_grad()
            loss = model(ids, labels=ids)
            booster.backward(loss, optimizer)
            norm = booster.clip_grad_norm(optimizer, a.grad_clip)
            optimizer.step()
            scheduler.step()
            step += 1
            mean = loss.detach().clone()
            colossal.dist.all_reduce(mean, op="avg")
            if rank == 0 and (step % a.log_interval == 0 or step == a.steps or step == 1):
                tokens_s = step * a.global_batch_size * a.block_size / (time.time() - t0)
                print(f"step {step}/{a.steps} loss {mean.item():.6f} grad_norm {norm:.4f} "
                      f"lr {scheduler.get_last_lr()[0]:.3e} tokens/s {tokens_s:.0f}", flush=True)
            if step == a.steps:
                break
        epoch += 1

    model.save_pretrained(a.output, tokenizer=tokenizer)
    if rank == 0:
        print(f"saved: {a.output} (opens in transformers and infer_llama)")
        sample = colossal.llama.generate(a.output, "It is a truth", max_new_tokens=16, temperature=0)
        print(f"sample: It is a truth{sample}", flush=True)


if __name__ == "__main__":
    main()
