"""Two real CPU processes (gloo) with gradient accumulation give the same update as one process on the same global
batch: the loss denominator is one global token count across processes and accumulation steps."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from .helpers import free_port, make_model_and_tokenizer

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent


# Every run of this file, by name: (processes, LooGspoConfig overrides, task). All two-process runs share ONE torchrun
# launch and all one-process references one plain launch (tests/dist_worker.py runs the cases in turn): a launch's
# cost is starting the processes, not the tiny runs.
_DS = dict(dynamic_sampling=True, num_generations=4, gradient_accumulation_steps=2, steps_per_generation=2)
_FEEDBACK = dict(
    entropy_feedback=True, entropy_feedback_target=100.0, entropy_step=1e-3, entropy_k_max=2.5e-3, max_steps=3
)
_PROCESS = dict(process_advantage_coef=0.5, num_generations=8, max_completion_length=24)
_DS_MODES = {
    "dapo": {},
    "probe": {"probe_generations": 2},
    "adaptive": {"probe_generations": 2, "adaptive_group_size": True, "max_generations": 6},
}
CASES = {
    # S = GA = 2: the step's count is known when the step starts
    "two-S=GA": (
        2,
        dict(per_device_train_batch_size=4, gradient_accumulation_steps=2, steps_per_generation=2),
        "parity",
    ),
    # S = 1 < GA = 2: the step spans two generation rounds, exact rescale at the end of the step
    "two-S<GA": (
        2,
        dict(per_device_train_batch_size=4, gradient_accumulation_steps=2, steps_per_generation=1),
        "parity",
    ),
    "one": (1, dict(per_device_train_batch_size=16, gradient_accumulation_steps=1, steps_per_generation=1), "parity"),
    **{
        f"two-ds-{m}": (2, dict(per_device_train_batch_size=3, **_DS, **o), "controlled") for m, o in _DS_MODES.items()
    },
    **{
        f"one-ds-{m}": (1, dict(per_device_train_batch_size=6, **_DS, **o), "controlled") for m, o in _DS_MODES.items()
    },
    "two-entropy": (
        2,
        dict(per_device_train_batch_size=4, gradient_accumulation_steps=2, steps_per_generation=2, **_FEEDBACK),
        "parity",
    ),
    "one-entropy": (
        1,
        dict(per_device_train_batch_size=16, gradient_accumulation_steps=1, steps_per_generation=1, **_FEEDBACK),
        "parity",
    ),
    # the clip-range controller: S = 4, GA = 2 → two optimizer steps per round, each over both processes' rows
    "two-clip": (
        2,
        dict(
            per_device_train_batch_size=4,
            gradient_accumulation_steps=2,
            steps_per_generation=4,
            clip_target_fraction=0.15,
            epsilon=0.01,
            epsilon_high=0.02,
            max_steps=4,
        ),
        "parity",
    ),
    "two-process": (
        2,
        dict(per_device_train_batch_size=2, gradient_accumulation_steps=2, steps_per_generation=2, **_PROCESS),
        "multistep",
    ),
    "one-process": (
        1,
        dict(per_device_train_batch_size=8, gradient_accumulation_steps=1, steps_per_generation=1, **_PROCESS),
        "multistep",
    ),
}


def launch(model_dir: Path, out: Path, processes: int) -> None:
    """Run every case of ``CASES`` with ``processes`` processes in one launch; each writes ``out/<name>.pt``."""
    cases = [
        {"name": name, "overrides": overrides, "task": task}
        for name, (count, overrides, task) in CASES.items()
        if count == processes
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1", TRL_EXPERIMENTAL_SILENCE="1", PYTHONPATH=str(ROOT))
    worker = [str(ROOT / "tests" / "dist_worker.py"), "--model-dir", str(model_dir), "--out", str(out)]
    worker += ["--cases", json.dumps(cases), "--expect-processes", str(processes)]
    if processes > 1:
        # `accelerate launch --cpu --num_processes 2` silently runs ONE process; torchrun starts two.
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes)]
        cmd += ["--master_port", str(free_port()), *worker]
    else:
        cmd = [sys.executable, *worker]
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    if result.returncode != 0 and "terminate called without an active exception" in result.stderr:
        # a rare abort of a rank while the process group shuts down (after the work): run the launch once more
        result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny")
    model, _ = make_model_and_tokenizer(seed=3)
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def runs(model_dir, tmp_path_factory):
    """Every case's result by name (both launches made once for the file)."""
    out = tmp_path_factory.mktemp("runs")
    launch(model_dir, out, processes=2)
    launch(model_dir, out, processes=1)
    return {name: torch.load(out / f"{name}.pt") for name in CASES}


def test_every_case_ran_with_its_process_count(runs):
    assert {name: result["processes"] for name, result in runs.items()} == {
        name: count for name, (count, _, _) in CASES.items()
    }


@pytest.mark.parametrize("two", ["two-S=GA", "two-S<GA"])
def test_two_processes_with_accumulation_equal_one_process(runs, two):
    dist, single = runs[two], runs["one"]
    assert dist["processes"] == 2 and single["processes"] == 1
    assert max(v.abs().max().item() for v in single["delta"].values()) > 1e-3  # a real update was compared
    for name, expected in single["delta"].items():
        torch.testing.assert_close(dist["delta"][name], expected, rtol=0, atol=1e-5, msg=f"parameter {name}")
    assert abs(dist["loss"] - single["loss"]) < 1e-5


@pytest.mark.parametrize("mode", list(_DS_MODES))
def test_dynamic_sampling_with_a_group_split_across_processes(runs, mode):
    """3 groups of 4 over 2 processes (6 rows each: the middle group is split), refill rounds, same decisions."""
    dist, single = runs[f"two-ds-{mode}"], runs[f"one-ds-{mode}"]
    log_d, log_s = dist["logs"][0], single["logs"][0]
    keys = ("sampling/rounds", "sampling/frac_filtered", "sampling/frac_all_correct", "sampling/groups")
    for key in (*keys, "tokens/generated"):
        assert log_d[key] == log_s[key], key
    assert log_s["sampling/rounds"] > 1 or mode == "adaptive"  # refill happened (adaptive: larger groups)
    assert dist["prompts"] == single["prompts"]  # the same groups reached the loss, in the same order
    assert max(v.abs().max().item() for v in single["delta"].values()) > 1e-3
    for name, expected in single["delta"].items():
        torch.testing.assert_close(dist["delta"][name], expected, rtol=0, atol=1e-5, msg=f"parameter {name}")


def test_entropy_feedback_sees_the_same_global_entropy_and_k(runs):
    """Ĥ is the token-weighted mean over all processes and micro-batches, not a mean of per-process means."""
    dist, single = runs["two-entropy"], runs["one-entropy"]
    logs_d = [h for h in dist["logs"] if "entropy_feedback/k" in h]
    logs_s = [h for h in single["logs"] if "entropy_feedback/k" in h]
    assert len(logs_d) == len(logs_s) == 3
    for a, b in zip(logs_d, logs_s, strict=True):
        assert abs(a["entropy_feedback/entropy"] - b["entropy_feedback/entropy"]) < 1e-5
        assert a["entropy_feedback/k"] == pytest.approx(b["entropy_feedback/k"])
    assert logs_s[-1]["entropy_feedback/k"] > 0


def test_process_feedback_with_a_group_split_across_processes(runs):
    """Span signals are gathered with the rewards: a group of 8 split over 2 processes gets the same per-token
    process advantages, safeguards and update as in one process."""
    dist, single = runs["two-process"], runs["one-process"]
    log_d, log_s = dist["logs"][0], single["logs"][0]
    for key in ("process/positive_in_failed", "process/signal_mean", "process/pass_rate", "process/frac_flagged"):
        assert log_d[key] == pytest.approx(log_s[key], abs=1e-12), key
    assert 0 < log_s["process/positive_in_failed"] < 1
    assert max(v.abs().max().item() for v in single["delta"].values()) > 1e-3
    for name, expected in single["delta"].items():
        torch.testing.assert_close(dist["delta"][name], expected, rtol=0, atol=1e-5, msg=f"parameter {name}")


def test_the_clip_controller_measures_the_global_step_and_moves_every_rank_alike(runs):
    """The controller's estimate is over both processes and both micro-batches of the step (16 answers), and the
    range it sets is the same on every rank (replayed here from the logged global estimates)."""
    from trl_loo_gspo.algorithms.controllers import ClipControllerState, clip_controller_step

    run = runs["two-clip"]
    logs = [h for h in run["logs"] if "loss" in h]
    assert [h["clip/round_position"] for h in logs] == [0.0, 1.0, 0.0, 1.0]
    assert all(h["clip/answers"] == 16 for h in logs)  # 2 processes x 2 micro-batches x 4 rows
    offpolicy = [h for h in logs if h["clip/round_position"] == 1.0]
    assert all(h["clip/offpolicy_answers"] > 8 for h in offpolicy)  # more than one rank's share
    state, expected = ClipControllerState(log_epsilon=math.log(0.01)), []
    for h in logs:  # the controller's moves, replayed from the logged global estimates
        state = clip_controller_step(state, h.get("clip/epsilon_estimate", math.nan), 0.5, (1e-5, 0.5), 0.5)
        expected.append(math.exp(state.log_epsilon) if state.updates else 0.01)
    assert [h["clip/epsilon_low"] for h in logs] == pytest.approx(expected, rel=1e-12)
    assert expected[-1] != 0.01  # the controller moved
    (a, b) = run["epsilons"]
    assert a == b == pytest.approx([expected[-1], 2 * expected[-1]], rel=1e-12)
