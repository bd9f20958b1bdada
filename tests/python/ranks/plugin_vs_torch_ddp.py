"""Run by test_module.py under `colossal run --nproc_per_node 2`: a plain Python nn.Module trained
under one of our plugins and, beside it, under PyTorch's own DistributedDataParallel (Gloo, its
rendezvous through the launcher's store, as under torchrun), same seed, same data; every step's
loss and gradient norm, and every parameter after the last step, must agree within `tol`
(relative). Usage: plugin_vs_torch_ddp.py PLUGIN [STEPS]
"""
import sys

import torch
import torch.distributed as tdist
import torch.nn as nn

import colossal

plugin = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 4
tol = 1e-5

rank, world = colossal.launch()
# env://: `colossal run` sets torchrun's variables, its store included, so torch.distributed
# joins the same job beside our runtime.
tdist.init_process_group("gloo")


class Net(nn.Module):
    """Nested modules, a buffer, a frozen parameter: what named_parameters() flattening must keep."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(50, 16)
        self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 16)) for _ in range(2)])
        self.norm = nn.LayerNorm(16)
        self.head = nn.Linear(16, 50)
        self.register_buffer("scale", torch.tensor(0.5))
        self.frozen = nn.Parameter(torch.ones(16), requires_grad=False)

    def forward(self, ids):
        h = self.embed(ids) * self.frozen
        for b in self.blocks:
            h = h + b(h) * self.scale
        return self.head(self.norm(h))


def make():
    torch.manual_seed(7)
    model = Net()
    decay = [p for n, p in model.named_parameters() if p.requires_grad and p.dim() > 1]
    rest = [p for n, p in model.named_parameters() if p.requires_grad and p.dim() <= 1]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=3e-3, betas=(0.9, 0.95), eps=1e-8)
    return model, opt


def batch(step):
    g = torch.Generator().manual_seed(1000 * step + rank)  # each rank its own data
    ids = torch.randint(0, 50, (4, 12), generator=g)
    return ids, torch.roll(ids, -1, dims=1)


def loss_of(model, ids, target):
    return nn.functional.cross_entropy(model(ids).reshape(-1, 50), target.reshape(-1))


ours, ours_opt = make()
# ZeRO-3: chunks small enough that every module's parameters are released after use and gathered
# again by its forward hooks (by default this model's small tensors would all stay gathered).
options = dict(chunk_elements=1024, keep_gathered_below=0, prefetch=0) if plugin == "gemini" else {}
booster = colossal.Booster(plugin=plugin, **options)
ours, ours_opt, *_ = booster.boost(ours, ours_opt)
theirs, theirs_opt = make()
theirs = nn.parallel.DistributedDataParallel(theirs)

for step in range(steps):
    ids, target = batch(step)
    ours_opt.zero_grad()
    loss = loss_of(ours, ids, target)
    booster.backward(loss, ours_opt)
    norm = booster.clip_grad_norm(ours_opt, 1.0)
    ours_opt.step()

    theirs_opt.zero_grad()
    ref = loss_of(theirs, ids, target)
    ref.backward()
    ref_norm = nn.utils.clip_grad_norm_(theirs.parameters(), 1.0)
    theirs_opt.step()
    # The loss is this rank's; the norm is the global one (both runs average gradients over ranks).
    assert abs(loss.item() - ref.item()) <= tol * abs(ref.item()), (step, loss.item(), ref.item())
    assert abs(norm - ref_norm.item()) <= tol * ref_norm.item(), (step, norm, ref_norm.item())

if plugin == "gemini":
    report = ours_opt.memory_report()
    if rank == 0:
        print(report)
ref_params = dict(theirs.module.named_parameters())
worst = 0.0
ours_state = booster.state_dict(ours)  # whole weights whatever the plugin (ZeRO-3 keeps shards)
assert set(ours_state) >= set(ref_params), (sorted(ours_state), sorted(ref_params))
for name in ref_params:
    p, r = ours_state[name], ref_params[name]
    rel = ((p.detach() - r.detach()).abs().max() / r.detach().abs().max().clamp_min(1e-12)).item()
    worst = max(worst, rel)
    assert rel <= tol, (name, rel)
assert torch.equal(ours_state["frozen"], torch.ones(16)), "a frozen parameter must not move"
print(f"rank {rank}: {plugin} matches torch DDP over {steps} steps (worst relative parameter difference {worst:.2e})")
tdist.destroy_process_group()
colossal.dist.shutdown()
