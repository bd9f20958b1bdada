"""colossal.recsys: recommenders from Python.

    colossal.recsys.train(model="deepfm", plugin="zero2", epochs=2)   # train_recsys, same flags
"""
from . import _C
from ._arguments import command_line
from .booster import launch


def train(**flags):
    """Runs train_recsys with these flags (`train_recsys --help`). Joins the job first; Ctrl-C stops
    it at the next step with KeyboardInterrupt. Returns {"exit_code", "metrics": {"loss",
    "eval_auc", "eval_log_loss", "steps"}, "outputs": {"checkpoints", "log"}}."""
    launch()
    return _C.apps.train_recsys(command_line(flags))


__all__ = ["train"]
