"""--tensorboard DIR: the event files a training app writes, read back through TensorBoard's own
reader (tensorboard.backend.event_processing), hold the same scalars as its log.jsonl."""
import json
import math

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from conftest import APPS, colossal_run


def scalars(directory):
    events = EventAccumulator(str(directory), size_guidance={"scalars": 0})  # 0: keep every value
    events.Reload()
    return {tag: {e.step: e.value for e in events.Scalars(tag)} for tag in events.Tags()["scalars"]}


def expected_from_log(path):
    """The tags and values the log's lines should appear under: train/<metric> per step line,
    <event>/<metric> per event line (eval, checkpoint)."""
    want = {}
    for line in path.read_text().splitlines():
        record = json.loads(line)
        step = record.pop("step")
        kind = record.pop("event", None)
        record.pop("text", None)
        for name, value in record.items():
            if isinstance(value, (int, float)) and value is not None:
                want.setdefault(f"{kind or 'train'}/{name}", {})[step] = float(value)
    return want


def test_tensorboard_scalars_equal_the_json_lines(tmp_path):
    save = tmp_path / "run"
    colossal_run(2, f"{APPS}/train_recsys", "--save_dir", save, "--max_steps", 12,
                 "--log_interval", 3, "--held_out_fraction", 0.9, "--tensorboard", tmp_path / "tb",
                 "--load_checkpoint", "none")
    got = scalars(tmp_path / "tb")
    want = expected_from_log(save / "log.jsonl")
    for tag in ("train/loss", "train/lr", "train/grad_norm", "train/samples/s", "eval/auc", "eval/log_loss"):
        assert tag in want, f"{tag} missing from log.jsonl: {sorted(want)}"
    assert sorted(got) == sorted(want), f"tensorboard {sorted(got)}\nlog.jsonl {sorted(want)}"
    for tag, values in want.items():
        assert sorted(got[tag]) == sorted(values), f"{tag}: steps {sorted(got[tag])} vs {sorted(values)}"
        for step, value in values.items():
            # TensorBoard keeps a float32 (simple_value).
            assert math.isclose(got[tag][step], value, rel_tol=1e-6, abs_tol=1e-30), (tag, step, got[tag][step], value)
    assert sorted(got["train/loss"]) == [3, 6, 9, 12]
    assert sorted(got["eval/auc"]) == [0, 12]
