"""Run by test_module.py under `colossal run --nproc_per_node 2`: checkpoints written from Python.

Under ZeRO-2: the saved weights are Hugging Face safetensors equal to the module's state; they
load into a fresh model under DDP; and a full checkpoint (model, sharded optimizer, RNG) resumes
to the same parameters as the run that kept going. Usage: checkpoints.py DIR
"""
import sys
from pathlib import Path

import torch
import torch.nn as nn
from safetensors.torch import load_file

import colossal

root = Path(sys.argv[1])
rank, world = colossal.launch(seed=3)


def make(plugin):
    torch.manual_seed(11)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    booster = colossal.Booster(plugin=plugin)
    model, opt, *_ = booster.boost(model, opt)
    return booster, model, opt


def train(booster, model, opt, first, count):
    for step in range(first, first + count):
        g = torch.Generator().manual_seed(step * 10 + rank)
        x, y = torch.randn(6, 8, generator=g), torch.randn(6, 4, generator=g)
        opt.zero_grad()
        booster.backward(nn.functional.mse_loss(model(x), y), opt)
        opt.step()


booster, model, opt = make("zero2")
train(booster, model, opt, 0, 2)
booster.save_model(model, root / "weights")
if rank == 0:
    saved = load_file(str(root / "weights" / "model.safetensors"))
    state = model.state_dict()
    assert set(saved) == set(state), (sorted(saved), sorted(state))
    for k, v in state.items():
        assert torch.equal(saved[k], v), k

other_booster, other, other_opt = make("ddp")
other_booster.load_model(other, root / "weights")
for (n, a), (_, b) in zip(model.state_dict().items(), other.state_dict().items()):
    assert torch.equal(a, b), n

booster.save_checkpoint(model, root / "ckpt", step=2)
train(booster, model, opt, 2, 2)
resumed_booster, resumed, resumed_opt = make("zero2")
step, epoch = resumed_booster.load_checkpoint(resumed, root / "ckpt")
assert (step, epoch) == (2, 0), (step, epoch)
train(resumed_booster, resumed, resumed_opt, 2, 2)
for (n, a), (_, b) in zip(model.state_dict().items(), resumed.state_dict().items()):
    assert torch.equal(a, b), f"{n}: resumed run differs by {(a - b).abs().max().item()}"

try:
    resumed_booster.load_model(resumed, root / "missing")
    raise AssertionError("loading a missing directory must raise")
except RuntimeError as e:
    assert "missing" in str(e), e
colossal.dist.shutdown()
print(f"rank {rank}: checkpoints ok")
