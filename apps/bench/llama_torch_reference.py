"""The plain PyTorch way of training the bench_llama shapes, for side-by-side figures.

Hugging Face transformers' LlamaForCausalLM (SDPA attention), torch.optim.AdamW (fused), and
DistributedDataParallel over Gloo when launched with more than one rank (torchrun). Measures the
same things as bench_llama's own jobs, the same way: the fp32 2048x2048 matrix-product rate on
every rank at once before each step, and the median step time, and writes one row.

    python apps/bench/llama_torch_reference.py --shape M --threads 1 --steps 3 --row_file F
    torchrun --nproc_per_node 2 apps/bench/llama_torch_reference.py --shape M --threads 1 ...
"""
import argparse
import os
import resource
import statistics
import time

import torch
import torch.distributed as dist
from transformers import LlamaConfig, LlamaForCausalLM

from matmul_rate import matmul_gflops  # beside this script

SHAPES = {  # must match llama/shapes.cpp
    "S": dict(hidden_size=288, num_hidden_layers=6, num_attention_heads=6, intermediate_size=768, seq=256),
    "M": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=2048, seq=512),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="M")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--row_file", default="")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    distributed = int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        import datetime
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=600))
    n = dist.get_world_size() if distributed else 1
    rank = dist.get_rank() if distributed else 0
    s = dict(SHAPES[a.shape])
    seq = s.pop("seq")
    cfg = LlamaConfig(vocab_size=32000, num_key_value_heads=s["num_attention_heads"], max_position_embeddings=seq,
                      tie_word_embeddings=False, attn_implementation="sdpa", **s)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    if distributed:
        model = torch.nn.parallel.DistributedDataParallel(model)
    ids = torch.randint(32000, (a.batch, seq))
    mats = [torch.randn(2048, 2048), torch.randn(2048, 2048), torch.empty(2048, 2048)]
    times, rates = [], []
    for step in range(a.steps + 1):
        if distributed:
            dist.barrier()
        rate = torch.tensor([matmul_gflops(*mats)], dtype=torch.float64)
        if distributed:
            dist.barrier()
            dist.all_reduce(rate)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        t = time.perf_counter() - t0
        if step > 0:
            times.append(t)
            rates.append(rate.item())
    step_s = statistics.median(times)
    tokens_s = n * a.batch * seq / step_s
    d, L, f, V = cfg.hidden_size, cfg.num_hidden_layers, cfg.intermediate_size, cfg.vocab_size
    matmul_params = L * (4 * d * d + 3 * d * f) + V * d
    flops = 3 * (2 * matmul_params + 4 * L * d * seq)
    mm = statistics.median(rates)
    model_gflops = tokens_s * flops / 1e9
    peak = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20], dtype=torch.float64)
    if distributed:
        dist.all_reduce(peak, op=dist.ReduceOp.MAX)
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
