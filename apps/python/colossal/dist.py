"""colossal.dist: the runtime's process group and collectives on torch.Tensors (in place).

init() joins the job `colossal run` or torchrun describes (RANK, WORLD_SIZE, MASTER_ADDR, ...);
without those variables it is a world of one. A collective that cannot complete (a peer died,
the timeout passed) raises RuntimeError naming the group, the operation and the missing rank.
"""
from ._C import dist as _d

init = _d.init
is_initialized = _d.is_initialized
shutdown = _d.shutdown
rank = _d.rank
world_size = _d.world_size
local_rank = _d.local_rank
local_world_size = _d.local_world_size
backend = _d.backend
world_group = _d.world_group
new_group = _d.new_group
all_reduce = _d.all_reduce
broadcast = _d.broadcast
all_gather = _d.all_gather
reduce_scatter = _d.reduce_scatter
barrier = _d.barrier
Group = _d.Group

__all__ = ["init", "is_initialized", "shutdown", "rank", "world_size", "local_rank", "local_world_size",
           "backend", "world_group", "new_group", "all_reduce", "broadcast", "all_gather", "reduce_scatter",
           "barrier", "Group"]
