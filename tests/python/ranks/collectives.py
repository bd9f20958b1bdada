"""Run by test_module.py under `colossal run --nproc_per_node 2`: the collectives on torch.Tensors."""
import torch

import colossal
from colossal import dist

rank, world = colossal.launch()
assert world == 2 and dist.rank() == rank, (rank, world)
assert dist.local_world_size() == 2

t = torch.full((5,), float(rank + 1))
dist.all_reduce(t)
assert torch.equal(t, torch.full((5,), 3.0)), t
dist.all_reduce(t, op="max")
assert torch.equal(t, torch.full((5,), 3.0)), t

b = torch.arange(4, dtype=torch.float32) * (rank + 1)
dist.broadcast(b, src=1)
assert torch.equal(b, torch.arange(4, dtype=torch.float32) * 2), b

out = torch.empty(6)
dist.all_gather(out, torch.full((3,), float(rank)))
assert torch.equal(out, torch.tensor([0.0, 0, 0, 1, 1, 1])), out

shard = torch.empty(2)
dist.reduce_scatter(shard, torch.arange(4, dtype=torch.float32), op="sum")
assert torch.equal(shard, torch.arange(4, dtype=torch.float32)[2 * rank:2 * rank + 2] * 2), shard

pair = dist.new_group([1, 0], "reversed")
assert pair.size == 2 and pair.rank == 1 - rank, pair
x = torch.tensor([float(rank)])
dist.broadcast(x, src=0, group=pair)  # group rank 0 is global rank 1
assert x.item() == 1.0, x

try:
    dist.all_reduce(torch.ones(1), op="median")
    raise AssertionError("an unknown op must raise")
except ValueError as e:
    assert "median" in str(e), e

dist.barrier()
dist.shutdown()
print(f"rank {rank}: collectives ok")
