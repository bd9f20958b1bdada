"""colossal.bert: BERT encoders from Python.

    colossal.bert.train(epochs=1, plugin="zero2")                    # train_bert, same flags
    model = colossal.bert.BertForSequenceClassification.from_pretrained(d)
    logits = model(input_ids, attention_mask=mask)                   # [batch, labels]
    mlm = colossal.bert.BertForMaskedLM.from_pretrained(d)           # [batch, tokens, vocab]
"""
import json

from . import _C
from . import dist
from ._arguments import command_line
from .booster import launch


def train(**flags):
    """Runs train_bert with these flags (`train_bert --help`; --epochs 1 is epochs=1).

    Joins the job first, so under `colossal run` every rank takes part. Returns {"exit_code",
    "metrics": {"loss", "acc", "eval_loss", "eval_acc", "steps"}, "outputs": {"model"}}.
    """
    launch()
    return _C.apps.train_bert(command_line(flags))


class _Bert:
    _task = None

    def __init__(self, cpp, new_layers=""):
        self._cpp = cpp
        self._boosted = None
        self.new_layers = new_layers  # what the checkpoint lacked for this task (left initialised)

    @classmethod
    def from_pretrained(cls, model_dir, num_labels=0):
        cpp, new_layers = _C.bert.Model.load_pretrained(str(model_dir), cls._task, num_labels)
        return cls(cpp, new_layers)

    @classmethod
    def from_config(cls, config):
        """A new model (initialised for training from scratch) from a config.json dict or path."""
        if not isinstance(config, dict):
            with open(config) as f:
                config = json.load(f)
        return cls(_C.bert.Model.from_config_json(json.dumps(config), cls._task))

    @property
    def config(self):
        return json.loads(self._cpp.config_json)

    def __call__(self, input_ids, attention_mask=None, token_type_ids=None, labels=None):
        if labels is None:
            return self._cpp.forward(input_ids, attention_mask, token_type_ids)
        return self._cpp.loss(input_ids, attention_mask, token_type_ids, labels)

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

    def save_pretrained(self, model_dir):
        """config.json and model.safetensors, a directory `transformers` opens. Boosted, every rank
        calls it (the whole weights are gathered) and rank 0 writes."""
        rank = dist.rank() if dist.is_initialized() else 0
        self._cpp.save_pretrained(str(model_dir), self._boosted, rank == 0)
        if dist.is_initialized():
            dist.barrier()


class BertForMaskedLM(_Bert):
    """Logits [batch, tokens, vocab]; with labels ([batch, tokens], -100 not predicted) the mean
    cross entropy over the predicted positions."""
    _task = "mlm"


class BertForSequenceClassification(_Bert):
    """Logits [batch, num_labels]; with labels ([batch]) the mean cross entropy."""
    _task = "classify"


__all__ = ["train", "BertForMaskedLM", "BertForSequenceClassification"]
