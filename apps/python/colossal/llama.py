"""colossal.llama: LLaMA-style models from Python.

    colossal.llama.train(max_steps=200, plugin="zero2")          # train_llama, same flags
    colossal.llama.generate("out/llama/model", ["Once upon"])    # the paged-KV engine
    with colossal.llama.Server("out/llama/model", port=8000):     # the OpenAI-compatible API
        ...

For your own training loop, LlamaForCausalLM.from_pretrained(dir) is the C++ model: its
parameters are its own tensors, so torch.optim and the Booster take them as they are, and
save_pretrained writes a Hugging Face directory that `transformers` opens.
"""
import json
import signal
import threading
import time

from . import _C
from ._arguments import command_line
from .booster import launch
from . import dist

Tokenizer = _C.llama.Tokenizer


def train(reward=None, **flags):
    """Runs train_llama with these flags (`train_llama --help`; --max_steps 10 is max_steps=10).

    Joins the job first (colossal.launch), so under `colossal run` every rank takes part.
    Ctrl-C stops it at the next step with KeyboardInterrupt. Returns {"exit_code", "metrics":
    {"loss", "eval_loss", "steps"}, "outputs": {"model", "checkpoints", "tokenizer"}}.
    reward: mode="grpo"'s reward function, reward(prompt, completion, answer) -> float, called on
    every completion (an exception fails the step with its message).
    """
    launch()
    return _C.apps.train_llama(command_line(flags), reward)


# The engine's settings, declared once in C++ (apps/llama/engine_setup.h) and shared with
# infer_llama's flags: model, device, dtype, tp, draft_model, kv_cache_mib, block_size, ...
_ENGINE_OPTIONS = tuple(name for name in _C.llama.engine_settings() if name not in ("model", "seed"))


def _engine(model_dir, options):
    """The engine with options' engine settings (and seed); what is left in options is sampling."""
    engine = {k: options.pop(k) for k in _ENGINE_OPTIONS if k in options}
    return _C.llama.Generator(dict(engine, model=str(model_dir), seed=int(options.pop("seed", 0))))


def generate(model_dir, prompts, max_new_tokens=64, temperature=0.7, top_k=40, top_p=0.95,
             repetition_penalty=1.1, return_tokens=False, **options):
    """Completions of `prompts` (a string or a list) by the model directory; infer_llama's defaults.

    Sampling options: min_p, presence_penalty, frequency_penalty, seed, stop, ignore_eos; engine
    options: infer_llama's (device, dtype, tp, draft_model, num_speculative_tokens, kv_cache_mib,
    block_size, max_batch, max_batched_tokens, threads); `model_dir` may be a GGUF file.
    Returns the text (or a list of texts) generated after each prompt; with return_tokens, a
    dict per prompt: text, tokens (the generated ids) and finish_reason.
    """
    single = isinstance(prompts, str)
    options = dict(options)
    engine = {k: options.pop(k) for k in _ENGINE_OPTIONS if k in options}
    sampling = dict(max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
                    repetition_penalty=repetition_penalty, **options)
    _C.llama.check_sampling(sampling)  # a misspelt option fails before the model loads
    generator = _engine(model_dir, dict(engine, seed=options.get("seed", 0)))
    results = generator.generate([prompts] if single else list(prompts), sampling)
    out = [dict(r) for r in results] if return_tokens else [r["text"] for r in results]
    return out[0] if single else out


class Server:
    """The OpenAI-compatible server (POST /v1/completions, /v1/chat/completions, GET /v1/models,
    /health, /metrics) on a background thread, as infer_llama --serve runs it.

        with colossal.llama.Server("out/llama/model", port=8000) as server:
            client = openai.OpenAI(base_url=server.url + "/v1", api_key="none")
    """

    def __init__(self, model_dir, host="127.0.0.1", port=8000, served_model_name=None, **engine):
        model_dir = str(model_dir)
        name = served_model_name or model_dir.rstrip("/").split("/")[-1] or "llama"
        self.url = f"http://{host}:{port}"
        self.model_name = name
        engine = dict(engine)
        generator = _engine(model_dir, engine)
        if engine:
            raise TypeError(f"colossal.llama.Server: unknown option(s) {sorted(engine)}; the engine takes "
                            f"{', '.join(_ENGINE_OPTIONS + ('seed',))}")
        self._server = _C.llama.Server(generator, host, int(port), name)

    def start(self):
        """Returns once the server listens (or raises what stopped it)."""
        import urllib.request
        self._server.start()
        for _ in range(600):
            if not self._server.running:
                raise RuntimeError(f"colossal: the server stopped: {self._server.error}")
            try:
                urllib.request.urlopen(self.url + "/health", timeout=1)
                return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"colossal: the server did not answer at {self.url}/health within 30 s")

    def stop(self):
        """Refuses new requests, lets in-flight ones finish, then returns."""
        self._server.stop()

    def wait(self):
        """Blocks until Ctrl-C or SIGTERM (or the server stops by itself), then stops the server."""
        stop = threading.Event()
        previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
        try:
            while self._server.running and not stop.wait(0.2):
                pass
        except KeyboardInterrupt:
            pass
        finally:
            signal.signal(signal.SIGTERM, previous)
            self.stop()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def serve(model_dir, host="127.0.0.1", port=8000, **options):
    """infer_llama --serve: serves until Ctrl-C or SIGTERM, then drains in-flight requests."""
    server = Server(model_dir, host=host, port=port, **options).start()
    print(f"[colossal.llama] serving {server.model_name} at {server.url}/v1 (Ctrl-C stops)", flush=True)
    server.wait()


class LlamaForCausalLM:
    """The C++ decoder (LLaMA and the families of its blocks: Mistral, Mixtral, Qwen2, Qwen3, as
    config.json's model_type says), for training loops written in Python.

    model(input_ids) is the logits [batch, seq, vocab]; model(input_ids, labels=labels) is the mean
    next-token cross entropy (labels are input_ids shifted inside; -100 is ignored). Boost it like
    any module: booster.boost(model, optimizer) (plugins ddp, zero1, zero2, gemini).
    """

    def __init__(self, cpp):
        self._cpp = cpp
        self._boosted = None

    @classmethod
    def from_pretrained(cls, model_dir):
        return cls(_C.llama.CausalLM.load_pretrained(str(model_dir)))

    @classmethod
    def from_config(cls, config):
        """A new model (initialised for training from scratch) from a config.json dict or path."""
        if not isinstance(config, dict):
            with open(config) as f:
                config = json.load(f)
        return cls(_C.llama.CausalLM.from_config_json(json.dumps(config)))

    @property
    def config(self):
        return json.loads(self._cpp.config_json)

    def __call__(self, input_ids, labels=None):
        if labels is None:
            return self._cpp.forward(input_ids)
        return self._cpp.loss(input_ids, labels)

    def named_parameters(self):
        return iter(self._cpp.named_parameters())

    def parameters(self):
        return iter(p for _, p in self._cpp.named_parameters())

    def train(self, mode=True):
        self._cpp.train(mode)
        return self

    def eval(self):
        return self.train(False)

    @property
    def training(self):
        return self._cpp.training

    def _cpp_module(self):
        return self._cpp.cpp_module()

    def save_pretrained(self, model_dir, tokenizer=None):
        """config.json, generation_config.json, model.safetensors and (given a Tokenizer) its files:
        a directory `transformers` and infer_llama open. Boosted, every rank calls it (the whole
        weights are gathered) and rank 0 writes."""
        rank = dist.rank() if dist.is_initialized() else 0
        self._cpp.save_pretrained(str(model_dir), self._boosted, tokenizer, rank == 0)
        if dist.is_initialized():
            dist.barrier()


# transformers' name for "whichever decoder the directory holds".
AutoModelForCausalLM = LlamaForCausalLM

__all__ = ["train", "generate", "serve", "Server", "Tokenizer", "LlamaForCausalLM", "AutoModelForCausalLM"]
