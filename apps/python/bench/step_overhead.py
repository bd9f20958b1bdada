"""The cost of driving a training step from Python: train_toy's model and loop (apps/examples/
train_toy.cpp) written in Python, trained under our plugin from Python and, beside it, under
PyTorch's own DistributedDataParallel (what a user would run instead). Compare its samples/s with
train_toy's on the same flags:

  build/apps/colossal run --nproc_per_node 2 -- build/apps/train_toy --optimizer adamw --steps 300
  build/apps/colossal run --nproc_per_node 2 -- PYTHON apps/python/bench/step_overhead.py --steps 300

(PYTHONPATH=build/python.) Prints samples/s over the steps after a warm-up, for each runner.
train_toy prints a running rate from its first step; its rate after a warm-up of W steps is
(N - W) * batch / (t_N - t_W), with t_k = k * batch / (the rate printed at step k).
"""
import argparse
import time

import torch
import torch.distributed as tdist
import torch.nn as nn
import torch.nn.functional as F

import colossal


class ToyMLP(nn.Module):
    """train_toy's ToyMLP: fc1 -> gelu -> norm -> fc2 -> gelu -> head."""

    def __init__(self, hidden):
        super().__init__()
        self.fc1 = nn.Linear(32, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.head = nn.Linear(hidden, 1)

    def forward(self, x):
        return self.head(F.gelu(self.fc2(self.norm(F.gelu(self.fc1(x))))))


def run(name, step_fn, steps, warmup, batch):
    for s in range(warmup):
        step_fn(s)
    tdist.barrier()
    t0 = time.perf_counter()
    for s in range(warmup, warmup + steps):
        step_fn(s)
    tdist.barrier()
    rate = steps * batch / (time.perf_counter() - t0)
    if colossal.dist.rank() == 0:
        print(f"{name}: {rate:.0f} samples/s ({steps} steps after {warmup} warm-up)", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--batch_size", type=int, default=64, help="global batch, as train_toy's")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--plugin", default="ddp")
    a = p.parse_args()
    rank, world = colossal.launch(seed=0)
    tdist.init_process_group("gloo")  # env://: the launcher's store
    torch.manual_seed(1)
    w = torch.randn(32, 1) / 4
    gen = torch.Generator().manual_seed(2 + rank)
    local = a.batch_size // world

    def data():
        x = torch.randn(local, 32, generator=gen)
        return x, torch.sin(x @ w)

    def make():
        torch.manual_seed(0)
        m = ToyMLP(a.hidden)
        return m, torch.optim.AdamW(m.parameters(), lr=3e-3, weight_decay=0.01)

    model, opt = make()
    booster = colossal.Booster(plugin=a.plugin)
    model, opt, *_ = booster.boost(model, opt)

    def ours(_):
        x, y = data()
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        booster.backward(loss, opt)
        loss.item()  # as train_toy reads every step's loss
        booster.clip_grad_norm(opt, 1.0)
        opt.step()

    ref, ref_opt = make()
    ref = nn.parallel.DistributedDataParallel(ref)

    def theirs(_):
        x, y = data()
        ref_opt.zero_grad()
        loss = F.mse_loss(ref(x), y)
        loss.backward()
        loss.item()
        nn.utils.clip_grad_norm_(ref.parameters(), 1.0)
        ref_opt.step()

    # Alternating, twice: a burst of load from another process hits both runners.
    for _ in range(2):
        run(f"python + colossal {a.plugin}", ours, a.steps, a.warmup, a.batch_size)
        run("python + torch DDP", theirs, a.steps, a.warmup, a.batch_size)
    tdist.destroy_process_group()
    colossal.dist.shutdown()


if __name__ == "__main__":
    main()
