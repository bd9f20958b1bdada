"""The plain PyTorch way of training the bench_llama shapes, for side-by-side figures.

The same architecture as llama/model.h written as a PyTorch user would (RMSNorm, rotary
embeddings, F.scaled_dot_product_attention with a causal mask, SwiGLU, untied head; not
transformers' class and its overheads), trained with torch.optim.AdamW (fused) under one of
  --strategy ddp     DistributedDataParallel over Gloo (one process: no wrapper)
  --strategy zero1   DDP + ZeroRedundancyOptimizer (optimizer state sharded: ZeRO-1)
  --strategy fsdp2   fully_shard per decoder layer and at the root (ZeRO-3)
optionally under torch.compile (--compile) and torch.autocast("cpu", bfloat16) (--precision
bf16). With --lora_rank R the model is fine-tuned as a PEFT user does it: get_peft_model with
LoRA (r R, alpha 2R) on every projection of the blocks, the rest frozen; --quantize_base nf4
makes those projections bitsandbytes' Linear4bit first (QLoRA). Measures what bench_llama measures for its own jobs, the same way: the fp32 2048x2048
matrix-product rate on every rank at once before each step, and the median step time; rank 0
writes one row.

    python apps/bench/llama_torch_reference.py --shape M --threads 2 --steps 3 --row_file F
    torchrun --nproc_per_node 2 apps/bench/llama_torch_reference.py --shape M --threads 1 \\
        --strategy fsdp2 --compile --precision bf16 ...
"""
import argparse
import contextlib
import os
import resource
import statistics
import time

import torch
import torch.utils.checkpoint
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from matmul_rate import matmul_gflops  # beside this script

SHAPES = {  # must match llama/shapes.cpp
    "S": dict(dim=288, layers=6, heads=6, ffn=768, seq=256),
    "M": dict(dim=768, layers=12, heads=12, ffn=2048, seq=512),
    "1B": dict(dim=2048, layers=18, heads=16, ffn=5632, seq=2048),
}
VOCAB, EPS, THETA = 32000, 1e-6, 10000.0


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * self.weight


def rotary_tables(seq, head_dim):
    inv = 1.0 / THETA ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
    angles = torch.outer(torch.arange(seq, dtype=torch.float32), inv)
    angles = torch.cat([angles, angles], -1)
    return angles.cos(), angles.sin()


def rotate(x, cos, sin):  # x [B, H, T, D], rotate-half convention as llama/
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], -1)
    return x * cos + rotated * sin


class Block(nn.Module):
    def __init__(self, dim, heads, ffn):
        super().__init__()
        self.heads = heads
        self.attn_norm, self.mlp_norm = RMSNorm(dim), RMSNorm(dim)
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.gate, self.up = nn.Linear(dim, ffn, bias=False), nn.Linear(dim, ffn, bias=False)
        self.down = nn.Linear(ffn, dim, bias=False)

    def forward(self, x, cos, sin):
        B, T, D = x.shape
        h = self.attn_norm(x)
        split = lambda t: t.view(B, T, self.heads, -1).transpose(1, 2)
        q, k, v = split(self.q(h)), split(self.k(h)), split(self.v(h))
        a = F.scaled_dot_product_attention(rotate(q, cos, sin), rotate(k, cos, sin), v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(B, T, D))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self, dim, layers, heads, ffn, seq):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim)
        self.layers = nn.ModuleList(Block(dim, heads, ffn) for _ in range(layers))
        self.norm = RMSNorm(dim)
        self.head = nn.Linear(dim, VOCAB, bias=False)
        cos, sin = rotary_tables(seq, dim // heads)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    grad_checkpoint = False  # recompute each block in backward (torch.utils.checkpoint, non-reentrant)

    def forward(self, ids):  # mean next-token cross-entropy, as LlamaForCausalLM::loss
        x = self.embed(ids)
        for layer in self.layers:
            if self.grad_checkpoint and torch.is_grad_enabled():
                x = torch.utils.checkpoint.checkpoint(layer, x, self.cos, self.sin, use_reentrant=False)
            else:
                x = layer(x, self.cos, self.sin)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB).float(), ids[:, 1:].reshape(-1))


PROJECTIONS = ["q", "k", "v", "o", "gate", "up", "down"]


def peft_model(model, rank, quantize_base):
    """PEFT's LoRA on the blocks' projections (the embedding, norms and head frozen), on a base
    made of bitsandbytes' NF4 Linear4bit layers for QLoRA."""
    from peft import LoraConfig, get_peft_model
    if quantize_base == "nf4":
        import bitsandbytes as bnb
        for block in model.layers:
            for name in PROJECTIONS:
                dense = getattr(block, name)
                q = bnb.nn.Linear4bit(dense.in_features, dense.out_features, bias=False, compute_dtype=torch.float32,
                                      quant_type="nf4", compress_statistics=True)
                q.weight = bnb.nn.Params4bit(dense.weight.data, requires_grad=False, quant_type="nf4",
                                             compress_statistics=True)
                setattr(block, name, q.to("cpu"))
    return get_peft_model(model, LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=PROJECTIONS))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="M")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--strategy", default="ddp", choices=["ddp", "zero1", "fsdp2"])
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--row_file", default="")
    ap.add_argument("--lora_rank", type=int, default=0, help="PEFT LoRA on every projection of the blocks")
    ap.add_argument("--quantize_base", default="", choices=["", "nf4"], help="with --lora_rank: bitsandbytes NF4 base")
    ap.add_argument("--grad_checkpoint", action="store_true", help="recompute each block in backward")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda (one GPU, one process: bench_kernels' training rows)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        import datetime
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    n = dist.get_world_size() if distributed else 1
    rank = dist.get_rank() if distributed else 0
    s = dict(SHAPES[a.shape])
    seq = s["seq"]
    torch.manual_seed(0)
    device = torch.device(a.device)
    cuda = device.type == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 rows in fp32, as ours
    model = Llama(**s).to(device)
    model.grad_checkpoint = a.grad_checkpoint
    if a.lora_rank:
        model = peft_model(model, a.lora_rank, a.quantize_base)
    if distributed and a.strategy == "fsdp2":
        from torch.distributed.fsdp import fully_shard
        for layer in model.layers:
            fully_shard(layer)
        fully_shard(model)
    trainable = [p for p in model.parameters() if p.requires_grad]
    if distributed and a.strategy == "zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(trainable, optimizer_class=torch.optim.AdamW, lr=1e-4, fused=True)
    else:
        opt = torch.optim.AdamW(trainable, lr=1e-4, fused=True)
    if distributed and a.strategy in ("ddp", "zero1"):
        model = torch.nn.parallel.DistributedDataParallel(model)
    step_model = torch.compile(model) if a.compile else model
    autocast = ((lambda: torch.autocast(device.type, dtype=torch.bfloat16)) if a.precision == "bf16"
                else contextlib.nullcontext)
    ids = torch.randint(VOCAB, (a.batch, seq), device=device)
    mm_dtype = torch.bfloat16 if a.precision == "bf16" else torch.float32  # MFU against this rate
    size = 8192 if cuda else 2048  # a GPU needs a larger product to reach its rate
    mats = [torch.randn(size, size, dtype=mm_dtype, device=device), torch.randn(size, size, dtype=mm_dtype, device=device),
            torch.empty(size, size, dtype=mm_dtype, device=device)]
    times, rates, losses = [], [], []
    warmup = 2 if a.compile else 1  # compilation happens in the first step
    for step in range(a.steps + warmup):
        if distributed:
            dist.barrier()
        rate = torch.tensor([matmul_gflops(*mats)], dtype=torch.float64)
        if distributed:
            dist.barrier()
            dist.all_reduce(rate)
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = step_model(ids)
        loss.backward()
        opt.step()
        if cuda:
            torch.cuda.synchronize()
        t = time.perf_counter() - t0
        losses.append(loss.item())
        if step >= warmup:
            times.append(t)
            rates.append(rate.item())
    step_s = statistics.median(times)
    tokens_s = n * a.batch * seq / step_s
    d, L, f = s["dim"], s["layers"], s["ffn"]
    matmul_params = L * (4 * d * d + 3 * d * f) + VOCAB * d
    flops = 3 * (2 * matmul_params + 4 * L * d * seq)  # llama::training_flops_per_token
    if a.lora_rank:
        flops = flops * 2 / 3  # no weight gradients for the frozen base (bench_llama counts the same)
    mm = statistics.median(rates)
    model_gflops = tokens_s * flops / 1e9
    peak = torch.tensor([(torch.cuda.max_memory_allocated() if cuda else
                          resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024) / 2**30], dtype=torch.float64)
    if distributed:
        dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    if rank == 0:
        print(f"[reference] {a.strategy}{'+compile' if a.compile else ''} {a.precision}"
              f"{f' lora {a.lora_rank}' if a.lora_rank else ''}{' ' + a.quantize_base if a.quantize_base else ''}: losses "
              + " ".join(f"{l:.4f}" for l in losses), flush=True)
    if rank == 0 and a.row_file:
        with open(a.row_file, "w") as out:
            out.write(f"{a.shape} {n}x{a.threads} {step_s} {tokens_s} {mm} {model_gflops} {model_gflops / mm} {peak.item()}\n")
    if distributed:
        # Gloo's teardown in torch 2.11 sometimes hangs one rank at exit (seen here on this
        # machine); the measurement is written, so leave without it.
        dist.barrier()
        os._exit(0)


if __name__ == "__main__":
    main()
