"""colossal.sora: video diffusion from Python.

    colossal.sora.train(stage="all", plugin="ddp")                        # train_sora, same flags
    colossal.sora.generate(prompt="a white cockatoo looks into the camera", out="cockatoo.mp4")
"""
from . import _C
from ._arguments import command_line
from .booster import launch


def train(**flags):
    """Runs train_sora with these flags (`train_sora --help`). Joins the job first; Ctrl-C stops
    it at the next step with KeyboardInterrupt. Returns {"exit_code", "metrics": {"vae_loss",
    "vae_psnr", "dit_loss", "dit_flow_loss"}, "outputs": {"vae", "dit"}}."""
    launch()
    return _C.apps.train_sora(command_line(flags))


def generate(**flags):
    """Runs generate_video with these flags (`generate_video --help`). Returns {"exit_code",
    "metrics": {"seconds"}, "outputs": {"video", "contact_sheet"}}."""
    return _C.apps.generate_video(command_line(flags))


__all__ = ["train", "generate"]
