"""Run by test_module.py under `colossal run --nproc_per_node 2`: a sequence of Python layers under
the hybrid plugin with pp 2 (colossal.PipelineModule + booster.execute_pipeline) against the
same layers as one nn.Sequential trained by plain PyTorch on the same whole batch; every step's
loss and, after the last, every parameter must agree within 1e-5 (relative).
The weights saved from the pipeline (booster.save_model) load into the unsplit nn.Sequential.
Usage: pipeline_vs_single.py SCHEDULE CHUNKS DIR
"""
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

import colossal

schedule, chunks, out_dir = sys.argv[1], int(sys.argv[2]), sys.argv[3]
steps, tol, n_layers, batch = 4, 1e-5, 8, 16

rank, world = colossal.launch()


class Block(nn.Module):
    def __init__(self, i):
        super().__init__()
        torch.manual_seed(100 + i)  # each layer its own seed: a rank builds only its own layers
        self.fc = nn.Linear(24, 24)
        self.norm = nn.LayerNorm(24)

    def forward(self, x):
        return x + F.gelu(self.fc(self.norm(x)))


def layers():
    return [(lambda i=i: Block(i)) for i in range(n_layers)]


def data(step):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(batch, 24, generator=g)
    return x, torch.tanh(x.flip(1))


booster = colossal.Booster(plugin="hybrid", pp=2, pp_schedule=schedule, num_model_chunks=chunks,
                           num_microbatches=4)
model = colossal.PipelineModule(layers(), booster)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
model, optimizer, criterion, *_ = booster.boost(model, optimizer, nn.MSELoss())

reference = nn.Sequential(*[make() for make in layers()])
ref_opt = torch.optim.AdamW(reference.parameters(), lr=1e-2, weight_decay=0.01)

for step in range(steps):
    x, y = data(step)
    optimizer.zero_grad()
    loss = booster.execute_pipeline(x, y, model, criterion, optimizer)
    optimizer.step()
    ref_opt.zero_grad()
    ref = F.mse_loss(reference(x), y)
    ref.backward()
    ref_opt.step()
    assert abs(loss - ref.item()) <= tol * abs(ref.item()), (step, loss, ref.item())

mine = dict(model.named_parameters())
assert mine and all(name in dict(reference.named_parameters()) for name in mine), sorted(mine)
worst = 0.0
for name, p in reference.named_parameters():
    if name not in mine:
        continue  # the other stage's
    rel = ((mine[name].detach() - p.detach()).abs().max() / p.detach().abs().max().clamp_min(1e-12)).item()
    worst = max(worst, rel)
    assert rel <= tol, (name, rel)
booster.save_model(model, out_dir)  # every stage's part, written whole
colossal.dist.barrier()
if rank == 0:
    from safetensors.torch import load_file
    whole = nn.Sequential(*[make() for make in layers()])
    whole.load_state_dict(load_file(f"{out_dir}/model.safetensors"), strict=True)
    for (name, p), (_, r) in zip(whole.named_parameters(), reference.named_parameters()):
        assert torch.allclose(p, r, rtol=tol, atol=1e-7), name
held = len({name.split(".")[0] for name in mine})
print(f"rank {rank}: pipeline {schedule} x{chunks} matches one process over {steps} steps "
      f"({held} of {n_layers} layers here, worst relative parameter difference {worst:.2e})")
colossal.dist.shutdown()
