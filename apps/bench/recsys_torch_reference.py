"""The same DLRM in plain PyTorch (nn.EmbeddingBag + DistributedDataParallel over Gloo, dense
AdamW): what a user writes without TorchRec. Run by bench_recsys (under `colossal run`, joining
through torchrun's variables) or alone. Prints one line: `torch: <samples/s> samples/s`.
"""
import argparse
import os
import time

import numpy as np
import torch
import torch.distributed as tdist
import torch.nn as nn
import torch.nn.functional as F


class Dlrm(nn.Module):
    def __init__(self, dense, fields, rows, dim):
        super().__init__()
        self.bottom = nn.Sequential(nn.Linear(dense, 64), nn.ReLU(), nn.Linear(64, dim))
        self.tables = nn.ModuleList([nn.EmbeddingBag(rows, dim, mode="sum") for _ in range(fields)])
        n = fields + 1
        self.register_buffer("pairs", torch.triu_indices(n, n, 1), persistent=False)
        self.top = nn.Sequential(nn.Linear(dim + n * (n - 1) // 2, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(),
                                 nn.Linear(32, 1))

    def forward(self, dense, ids, offsets):
        x = F.relu(self.bottom(dense))
        t = torch.stack([x] + [tab(i, o) for tab, i, o in zip(self.tables, ids, offsets)], 1)
        z = torch.bmm(t, t.transpose(1, 2))[:, self.pairs[0], self.pairs[1]]
        return self.top(torch.cat([x, z], 1)).squeeze(1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--table_size", type=int, default=200000)
    p.add_argument("--fields", type=int, default=26)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--batch", type=int, default=2048, help="global")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--zipf", type=float, default=1.05)
    a = p.parse_args()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        tdist.init_process_group("gloo")
    torch.manual_seed(0)
    model = Dlrm(13, a.fields, a.table_size, a.dim)
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0)
    rng = np.random.default_rng(rank)
    local = a.batch // world
    zipf_ranks = lambda n: np.minimum(rng.zipf(a.zipf + 0.0001, n) - 1, a.table_size - 1)  # noqa: E731

    def batch():
        dense = torch.from_numpy(rng.standard_normal((local, 13), dtype=np.float32))
        ids = [torch.from_numpy((zipf_ranks(local) * 31 + f) % a.table_size) for f in range(a.fields)]
        offsets = [torch.arange(local) for _ in range(a.fields)]
        return dense, ids, offsets, torch.from_numpy((rng.random(local) < 0.3).astype(np.float32))

    batches = [batch() for _ in range(8)]
    for s in range(a.warmup + a.steps):
        if s == a.warmup:
            if world > 1:
                tdist.barrier()
            t0 = time.perf_counter()
        dense, ids, offsets, labels = batches[s % len(batches)]
        opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(model(dense, ids, offsets), labels)
        loss.backward()
        opt.step()
    if world > 1:
        tdist.barrier()
    rate = a.steps * a.batch / (time.perf_counter() - t0)
    if rank == 0:
        print(f"torch: {rate:.0f} samples/s", flush=True)
    if world > 1:
        tdist.destroy_process_group()


if __name__ == "__main__":
    main()
