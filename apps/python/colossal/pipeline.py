"""Pipeline parallelism for a model written in Python: a sequence of layers, split over the
pipeline's stages, run by the C++ schedules (gpipe, 1f1b, interleaved, zbh1, zbv).

    booster = colossal.Booster(plugin="hybrid", pp=2, num_microbatches=4)   # pp x dp = the world
    model = colossal.PipelineModule([lambda i=i: Block(i) for i in range(8)], booster)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer, criterion, *_ = booster.boost(model, optimizer, criterion)
    loss = booster.execute_pipeline(x, y, model, criterion, optimizer)   # forward + backward
    optimizer.step()

Each rank builds only the layers of its own stage(s): pass zero-argument callables (or modules,
which are then dropped on the ranks that do not hold them). Layers are shared out in equal counts
over the virtual stages (stages x num_model_chunks). The parameters keep the names they would
have in nn.Sequential(*layers) ("3.weight"), so a checkpoint saved under any pipeline layout
loads into the unsplit sequence.
"""
import torch
import torch.nn as nn


def _split(n_layers, parts):
    """[begin, end) of each of `parts` nearly equal runs of n_layers (earlier runs one longer)."""
    if parts > n_layers:
        raise ValueError(f"colossal: {n_layers} layers cannot fill {parts} pipeline stages (pp x num_model_chunks)")
    base, extra = divmod(n_layers, parts)
    bounds, start = [], 0
    for i in range(parts):
        end = start + base + (1 if i < extra else 0)
        bounds.append((start, end))
        start = end
    return bounds


class PipelineModule(nn.Module):
    """This rank's stage of a sequential model: the layers of its chunk(s), named as in
    nn.Sequential. forward_chunk(c, x) runs chunk c; forward(x) runs them in order (one rank
    holding every stage: pp 1)."""

    def __init__(self, layers, booster):
        super().__init__()
        layout = booster._cxx.pipeline_layout()
        self.layout = layout
        stages = max(1, layout["stages"])
        parts = _split(len(layers), stages * layout["chunks"]) if stages > 1 else [(0, len(layers))]
        self.chunk_ranges = [parts[v] for v in layout["virtual_stages"]] if stages > 1 else parts
        for begin, end in self.chunk_ranges:
            for i in range(begin, end):
                layer = layers[i]
                if not isinstance(layer, nn.Module):
                    layer = layer()
                if not isinstance(layer, nn.Module):
                    raise TypeError(f"colossal: layer {i} is a {type(layer).__name__}, not a torch.nn.Module")
                self.add_module(str(i), layer)

    def forward_chunk(self, chunk, x):
        begin, end = self.chunk_ranges[chunk]
        for i in range(begin, end):
            x = self._modules[str(i)](x)
        return x

    def chunk_parameters(self, chunk):
        begin, end = self.chunk_ranges[chunk]
        return [p for i in range(begin, end) for p in self._modules[str(i)].parameters() if p.requires_grad]

    def forward(self, x):
        for c in range(len(self.chunk_ranges)):
            x = self.forward_chunk(c, x)
        return x


def microbatches(batch, count):
    """A batch (a tensor, split along dim 0) or a list of microbatches, as a list of `count`."""
    if isinstance(batch, (list, tuple)):
        if len(batch) != count:
            raise ValueError(f"colossal: {len(batch)} microbatches given, the schedule runs {count}")
        return list(batch)
    if batch.size(0) % count:
        raise ValueError(f"colossal: a batch of {batch.size(0)} does not split into {count} microbatches")
    return list(batch.chunk(count))


__all__ = ["PipelineModule"]
