"""colossal: colossal-cpp's parallel training runtime from Python.

Keep your torch.nn.Module and your data code; the Booster's plugins (DDP, ZeRO-1/2, ...) run
underneath in C++, on the same tensors (no copies):

    import torch, colossal
    colossal.launch(seed=42)                       # under `colossal run` or torchrun
    booster = colossal.Booster(plugin="zero2")     # any plugin, its options as keywords
    model = MyModule()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer, *_ = booster.boost(model, optimizer)
    for x, y in data:
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        booster.backward(loss, optimizer)
        optimizer.step()

Run it with `colossal run --nproc_per_node 2 python train.py`. The applications are functions
with their command-line flags as keywords: colossal.llama.train(max_steps=100, plugin="zero2"),
colossal.llama.generate(model_dir, prompts), colossal.llama.serve(model_dir),
colossal.vit.train(epochs=1); recipes are in apps/python/recipes/.
"""
import torch  # noqa: F401  (first: the extension links against the LibTorch torch loaded)

from . import _C
from . import dist
from .booster import Booster, BoostedOptimizer, launch, plugins
from .pipeline import PipelineModule
from . import bert
from . import llama
from . import recsys
from . import sora
from . import vit

__all__ = ["Booster", "BoostedOptimizer", "PipelineModule", "bert", "dist", "launch", "llama", "plugins", "recsys", "sora", "vit"]
