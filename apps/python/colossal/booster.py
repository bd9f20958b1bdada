"""The Booster from Python, shaped like ColossalAI's: boost() returns (model, optimizer, criterion,
dataloader, lr_scheduler), backward() and clip_grad_norm() go through the plugin, and the
checkpoints are the C++ ones (Hugging Face safetensors; resumable under any plugin or world size).

The optimizer you pass gives its kind and hyperparameters; LibTorch's optimizer of the same kind
(AdamW, Adam, SGD) runs over the same tensors, because the plugins need to own its state (ZeRO
shards it). The returned optimizer reads each param group's lr from your optimizer before every
step, so a torch.optim.lr_scheduler built on your optimizer keeps working.
"""
import contextlib

import torch

from . import _C
from . import dist
from .pipeline import PipelineModule, microbatches


def launch(seed=None, timeout_s=0.0, backend="auto"):
    """Joins the job (once; later calls return the same) and seeds torch the same on every rank."""
    if not dist.is_initialized():
        dist.init(timeout_s=timeout_s, backend=backend)
    if seed is not None:
        torch.manual_seed(seed)
    return dist.rank(), dist.world_size()


def plugins():
    """The plugin names, and what `Booster(plugin, **options)` accepts for each."""
    return _C.plugin_names(), _C.plugins_help()


def _text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


_DTYPES = {"Float": torch.float32, "BFloat16": torch.bfloat16, "Half": torch.float16}


def _describe_optimizer(optimizer, model):
    """(kind, [(params, options)]) for the C++ optimizer; errors name what has no counterpart."""
    kind = {torch.optim.AdamW: "adamw", torch.optim.Adam: "adam", torch.optim.SGD: "sgd"}.get(type(optimizer))
    if kind is None:
        raise TypeError(f"colossal: {type(optimizer).__name__} has no C++ counterpart here; "
                        "use torch.optim.AdamW, Adam or SGD")
    own = {id(p) for p in model.parameters()}
    groups = []
    for i, g in enumerate(optimizer.param_groups):
        for flag in ("amsgrad", "maximize", "capturable", "differentiable"):
            if g.get(flag, False):
                raise ValueError(f"colossal: optimizer param group {i} sets {flag}=True, which the C++ "
                                 f"{type(optimizer).__name__} does not do")
        if kind == "adam" and g.get("decoupled_weight_decay", False):
            kind = "adamw"
        for p in g["params"]:
            if id(p) not in own:
                raise ValueError(f"colossal: optimizer param group {i} holds a tensor of shape {tuple(p.shape)} "
                                 "that is not a parameter of the model being boosted")
        o = {"lr": float(g["lr"]), "weight_decay": float(g.get("weight_decay", 0.0))}
        if kind in ("adamw", "adam"):
            o["beta1"], o["beta2"] = (float(b) for b in g["betas"])
            o["eps"] = float(g["eps"])
        else:
            o["momentum"] = float(g.get("momentum", 0.0))
            o["dampening"] = float(g.get("dampening", 0.0))
            o["nesterov"] = 1.0 if g.get("nesterov", False) else 0.0
        groups.append((list(g["params"]), o))
    return kind, groups


def _tensors(output):
    """The tensors in a module's output (a tensor, or tuples, lists and dicts of them)."""
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, (tuple, list)):
        return [t for o in output for t in _tensors(o)]
    if isinstance(output, dict):
        return [t for o in output.values() for t in _tensors(o)]
    return []


def _install_forward_hooks(model, boosted):
    """Where the plugin hooks modules (ZeRO-3 gathers a module's parameters just before it runs and
    again before its backward), the same-named Python modules run those hooks. A parameter used
    outside its own module's forward (read directly by a parent) is not covered: as in ColossalAI's
    Gemini, call the module that owns it."""
    names = set(boosted.hooked_module_names())
    if not names:
        return
    for name, module in model.named_modules():
        if name in names:
            module.register_forward_pre_hook(lambda _m, args, n=name: boosted.run_pre_hook(
                n, [a for a in args if isinstance(a, torch.Tensor)]))
            module.register_forward_hook(lambda _m, _args, out, n=name: boosted.run_post_hook(n, _tensors(out)))
            names.discard(name)
    if names:
        raise RuntimeError(f"colossal: the plugin hooks modules {sorted(names)} that the Python module does not have")


class BoostedOptimizer:
    """The optimizer as the plugin runs it: step() and zero_grad() through the plugin."""

    def __init__(self, boosted, original):
        self._b = boosted
        self._original = original

    @property
    def param_groups(self):
        """Your optimizer's param groups: set "lr" here (or with an lr_scheduler) and step() uses it."""
        return self._original.param_groups

    @property
    def compute_dtype(self):
        """The dtype the model computes in under the plugin's precision: cast inputs to it."""
        return _DTYPES[self._b.compute_dtype]

    def step(self):
        """Returns False when the step was skipped (fp16 loss scaling found an overflow)."""
        for i, g in enumerate(self._original.param_groups):
            self._b.set_lr(i, float(g["lr"]))
        # What torch's lr schedulers look for to know the optimizer stepped before them (they
        # wrap your optimizer's own step(), which the plugin's step replaces).
        self._original._opt_called = True
        return self._b.step()

    def zero_grad(self, set_to_none=True):
        self._b.zero_grad()

    def memory_report(self):
        """Model-state bytes of this rank by category and tier."""
        return self._b.memory_report()


class Booster:
    """Booster(plugin="ddp" | "zero1" | "zero2" | "gemini" | "hybrid" | ..., **options).

    Options are the plugin's own (colossal.plugins() lists them) and the general ones: precision
    ("fp32", "bf16", "fp16"), device, tp, pp, sp, dp. An unknown name is an error naming it.
    """

    def __init__(self, plugin="ddp", **options):
        self._cxx = _C.Booster(plugin, {k: _text(v) for k, v in options.items()})
        self._plugin = plugin
        self._splits = {k: int(options.get(k, 1)) for k in ("tp", "pp", "sp", "ep")}
        self._by_model = {}

    def __repr__(self):
        return f"Booster({self._cxx.describe()})"

    def boost(self, model, optimizer, criterion=None, dataloader=None, lr_scheduler=None):
        cpp_model = hasattr(model, "_cpp_module")  # colossal.llama.LlamaForCausalLM
        if not (cpp_model or isinstance(model, torch.nn.Module)):
            raise TypeError(f"colossal: boost() takes a torch.nn.Module or a colossal model, got {type(model).__name__}")
        if id(model) in self._by_model:
            raise ValueError("colossal: this model is boosted already; boost each model once")
        # What a Python module cannot do yet: ZeRO-3 gathers its chunks around C++ module calls
        # (colossal::nn::call), and tp/pp/sp/ep split a model by its C++ parallel plan.
        pipelined = isinstance(model, PipelineModule)
        split = {k: v for k, v in self._splits.items() if v > 1 and not (k == "pp" and pipelined)}
        if split:
            raise ValueError(f"colossal: {split} splits the model by a parallel plan applied while the model is built; "
                             "from Python use data parallelism (ddp, zero1, zero2, gemini), pp through "
                             "colossal.PipelineModule, or colossal.llama.train(plugin='hybrid', tp=...) for the whole job")
        kind, groups = _describe_optimizer(optimizer, model)
        if cpp_model:
            boosted = self._cxx.boost_module(model._cpp_module(), kind, groups)
            model._boosted = boosted
        else:
            boosted = self._cxx.boost(list(model.named_parameters()), list(model.named_buffers()), kind, groups)
            _install_forward_hooks(model, boosted)
        self._by_model[id(model)] = boosted
        return model, BoostedOptimizer(boosted, optimizer), criterion, dataloader, lr_scheduler

    def enable_lora(self, model, rank=8, alpha=16, dropout=0.0, target_modules="all-linear", init="kaiming",
                    modules_to_save=(), seed=0):
        """LoRA adapters on a colossal model (colossal.llama.LlamaForCausalLM), before boost() and
        before its optimizer is built (ColossalAI's booster.enable_lora): the base is frozen, so
        the plugin reduces, shards and steps only the adapters. target_modules: layer names or
        suffixes ("q_proj"), * wildcards, or "all-linear" (the output head left out). Returns the
        adapted layers' names. save_pretrained(dir) of such a model writes the merged weights;
        colossal.llama.train(lora_rank=...) writes PEFT's adapter files."""
        if not hasattr(model, "_cpp_module"):
            raise TypeError("colossal: enable_lora adapts colossal models (colossal.llama.LlamaForCausalLM); for a "
                            "torch.nn.Module use peft.get_peft_model and boost the result")
        if id(model) in self._by_model:
            raise ValueError("colossal: enable_lora after boost: call it first, then build the optimizer and boost")
        targets = [target_modules] if isinstance(target_modules, str) else list(target_modules)
        adapted, _, _ = self._cxx.enable_lora(model._cpp_module(), rank, float(alpha), float(dropout), targets, init,
                                              list(modules_to_save), ["lm_head"], seed)
        return adapted

    def _boosted(self, model_or_optimizer):
        if isinstance(model_or_optimizer, BoostedOptimizer):
            return model_or_optimizer._b
        b = self._by_model.get(id(model_or_optimizer))
        if b is None:
            raise ValueError("colossal: this model or optimizer was not boosted by this Booster")
        return b

    def backward(self, loss, optimizer):
        """loss.backward() with the plugin's gradient synchronisation around it."""
        self._cxx.backward(loss, self._boosted(optimizer))

    def clip_grad_norm(self, optimizer, max_norm, norm_type=2.0):
        """Clips the global gradient norm over every rank holding a part; returns the norm before."""
        return self._cxx.clip_grad_norm(self._boosted(optimizer), max_norm, norm_type)

    @contextlib.contextmanager
    def no_sync(self, model_or_optimizer):
        """Gradient accumulation: backward inside it adds to local gradients without communicating."""
        b = self._boosted(model_or_optimizer)
        self._cxx.enter_no_sync(b)
        try:
            yield
        finally:
            self._cxx.exit_no_sync(b)

    def execute_pipeline(self, inputs, targets, model, criterion, optimizer):
        """One training step's forward and backward through the pipeline schedule (the plugin's
        pp_schedule over num_microbatches): `inputs` and `targets` are this data-parallel replica's
        batch (split along dim 0) or lists of microbatches; the first stage reads the inputs, the
        last the targets. criterion(output, target) is a microbatch's mean loss. Returns the step's
        loss (the mean over microbatches) on every rank; then call optimizer.step()."""
        return self._pipeline(inputs, targets, model, criterion, optimizer, train=True)

    def evaluate_pipeline(self, inputs, targets, model, criterion, optimizer):
        """The pipeline's forward only: the mean loss over the microbatches, on every rank."""
        with torch.no_grad():
            return self._pipeline(inputs, targets, model, criterion, optimizer, train=False)

    def _pipeline(self, inputs, targets, model, criterion, optimizer, train):
        if not isinstance(model, PipelineModule):
            raise TypeError("colossal: execute_pipeline runs a colossal.PipelineModule")
        listed = isinstance(inputs, (list, tuple))
        count = len(inputs) if listed else self._cxx.pipeline_microbatches(inputs.size(0))
        chunks = [model.chunk_parameters(c) for c in range(len(model.chunk_ranges))]
        return self._cxx.execute_pipeline(self._boosted(optimizer), model.forward_chunk, criterion, chunks,
                                          microbatches(inputs, count), microbatches(targets, count), train)

    def pipeline_layout(self):
        """Where this rank sits: stages, chunks, schedule, microbatches, rank (in the pipeline),
        virtual_stages (of its chunks), dp and dp_rank (its data-parallel replica: shard the data
        by these)."""
        return self._cxx.pipeline_layout()

    def state_dict(self, model):
        """The whole weights by name (copies), gathered whatever the plugin; every rank calls it."""
        return self._boosted(model).full_state()

    def save_model(self, model, path, shard_bytes=0):
        """Whole (unsplit) weights as Hugging Face safetensors in the directory `path`."""
        self._cxx.save_model(self._boosted(model), str(path), shard_bytes)

    def load_model(self, model, path, strict=True):
        """Weights saved under any plugin or world size; strict: missing or unexpected names are errors."""
        return self._cxx.load_model(self._boosted(model), str(path), strict)

    def save_checkpoint(self, model, root, step, epoch=0, keep_last=0):
        """<root>/step-<step>/ (model, optimizer, RNG, state), then <root>/latest points at it."""
        self._cxx.save_checkpoint(self._boosted(model), str(root), step, epoch, keep_last)

    def load_checkpoint(self, model, root):
        """Restores model, optimizer and RNG from <root>/latest (or a step directory); returns (step, epoch)."""
        return self._cxx.load_checkpoint(self._boosted(model), str(root))
