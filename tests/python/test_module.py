"""The `colossal` Python module (apps/python): import, collectives, a Python nn.Module under our
plugins against PyTorch's own DDP, checkpoints, and errors as Python exceptions.

Run by CTest with the built package on PYTHONPATH and the build's apps in COLOSSAL_APPS.
Multi-rank parts run real processes under `colossal run --nproc_per_node 2`.
"""
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import colossal
from conftest import colossal_run

RANKS = Path(__file__).parent / "ranks"


def run_ranks(script, *args, timeout=240):
    """The script under `colossal run --nproc_per_node 2`; its output."""
    return colossal_run(2, sys.executable, RANKS / script, *args, timeout=timeout)[1]


def test_imports_with_its_api():
    for name in ("Booster", "BoostedOptimizer", "launch", "plugins", "dist"):
        assert hasattr(colossal, name), name
    names, help_text = colossal.plugins()
    assert {"ddp", "zero1", "zero2", "gemini", "hybrid"} <= set(names)
    assert "zero_stage" in help_text or "placement" in help_text


def test_collectives_on_two_ranks():
    out = run_ranks("collectives.py")
    assert out.count("collectives ok") == 2, out


@pytest.mark.parametrize("plugin", ["ddp", "zero1", "zero2", "gemini"])
def test_python_module_under_plugin_matches_torch_ddp(plugin):
    out = run_ranks("plugin_vs_torch_ddp.py", plugin)
    assert out.count(f"{plugin} matches torch DDP") == 2, out


@pytest.mark.parametrize("schedule,chunks", [("1f1b", 1), ("interleaved", 2), ("zbv", 2)])
def test_python_layers_under_pipeline_match_one_process(schedule, chunks, tmp_path):
    out = run_ranks("pipeline_vs_single.py", schedule, chunks, tmp_path)
    assert out.count(f"pipeline {schedule} x{chunks} matches one process") == 2, out


def test_checkpoints_open_in_python_and_resume(tmp_path):
    out = run_ranks("checkpoints.py", tmp_path)
    assert out.count("checkpoints ok") == 2, out


ERRORS = r'''
import torch, colossal
colossal.launch()
def expect(exc, text, fn):
    try:
        fn()
    except exc as e:
        assert text in str(e), f"{text!r} not in {e}"
        return
    raise AssertionError(f"no {exc.__name__} for {text!r}")
expect(RuntimeError, "no_such_plugin", lambda: colossal.Booster(plugin="no_such_plugin"))
expect(RuntimeError, "bucket_size_nonsense", lambda: colossal.Booster(plugin="ddp", bucket_size_nonsense=3))
m = torch.nn.Linear(2, 2)
expect(TypeError, "Adagrad", lambda: colossal.Booster().boost(m, torch.optim.Adagrad(m.parameters())))
expect(ValueError, "amsgrad", lambda: colossal.Booster().boost(m, torch.optim.AdamW(m.parameters(), amsgrad=True)))
other = torch.nn.Linear(2, 2)
expect(ValueError, "not a parameter", lambda: colossal.Booster().boost(m, torch.optim.SGD(other.parameters(), lr=0.1)))
b = colossal.Booster()
m, opt, *_ = b.boost(m, torch.optim.SGD(m.parameters(), lr=0.1))
expect(ValueError, "boosted already", lambda: b.boost(m, torch.optim.SGD(m.parameters(), lr=0.1)))
expect(RuntimeError, "[dist] all_reduce", lambda: colossal.dist.all_reduce(torch.ones(2, 2).t()))
print("errors ok")
'''


def test_errors_arrive_as_python_exceptions_with_the_cxx_message():
    r = subprocess.run([sys.executable, "-c", ERRORS], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "errors ok" in r.stdout, r.stdout + r.stderr
