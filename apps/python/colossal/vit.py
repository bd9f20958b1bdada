"""colossal.vit: vision transformers from Python.

    colossal.vit.train(epochs=1, plugin="zero2")            # train_vit, same flags
    colossal.vit.train(predict=["shoe.png"], model_dir=d)   # classify with a saved model
"""
from . import _C
from ._arguments import command_line
from .booster import launch


def train(**flags):
    """Runs train_vit with these flags (`train_vit --help`; --epochs 1 is epochs=1).

    Joins the job first, so under `colossal run` every rank takes part. Ctrl-C stops it at the
    next step with KeyboardInterrupt. Returns {"exit_code", "metrics": {"loss", "acc",
    "eval_top1", "eval_top5", "steps"}, "outputs": {"model"}}.
    """
    launch()
    return _C.apps.train_vit(command_line(flags))


__all__ = ["train"]
