"""`trl-loo-gspo demo` under real-world conditions: Ctrl-C, a damaged policy cache, output to a log file or a
terminal, an output directory that holds an earlier run, and tests that keep out of the user's caches."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

import trl_loo_gspo.demo.policy as policy_module
import trl_loo_gspo.demo.run as run_module
from trl_loo_gspo.cli import main
from trl_loo_gspo.demo.config import prepare_output_dir
from trl_loo_gspo.demo.policy import PolicySpec, default_cache_dir, load_or_build_policy
from trl_loo_gspo.demo.run import DemoConfig, run_demo

from .helpers import TINY_POLICY

#: The smallest demo that still runs every stage (two curve points, a few steps of 16 completions).
TINY_DEMO = dict(prompts_per_step=4, num_generations=4, eval_samples=1, policy_overrides=TINY_POLICY)
ANSI_ESCAPE = re.compile(r"\x1b\[")
NAN = re.compile(r"\bnan\b", re.IGNORECASE)
PROGRESS_LINE = re.compile(r"^LOO-GSPO +\d+%")


def _tiny_demo(tmp_path: Path, **settings) -> DemoConfig:
    defaults = dict(output_dir=str(tmp_path / "out"), cache_dir=str(tmp_path / "cache"), rollout_tokens=300)
    return DemoConfig(**{**defaults, "curve_points": 2, **TINY_DEMO, **settings})


def _plain_console(monkeypatch) -> None:
    """Let rich decide from the (captured, not a TTY) stdout alone: no environment variable forcing a terminal."""
    for name in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS"):
        monkeypatch.delenv(name, raising=False)


def _cli(argv: list[str]) -> int:
    """``main(argv)``, failing the test (rather than stopping pytest) if a KeyboardInterrupt escapes it."""
    try:
        return main(argv)
    except KeyboardInterrupt:
        pytest.fail("KeyboardInterrupt escaped the CLI: the user sees a traceback")


def _shrink_cli_demo(monkeypatch, **settings) -> None:
    """The CLI's DemoConfig, shrunk to the tiny test settings (the CLI has no flags for them)."""
    real = run_module.run_demo
    monkeypatch.setattr(run_module, "run_demo", lambda config: real(replace(config, **TINY_DEMO, **settings)))


def _ctrl_c_at_step(monkeypatch, step: int, how: str) -> None:
    """Press Ctrl-C (deliver SIGINT to this process) or raise KeyboardInterrupt at the end of training ``step``."""
    original = run_module._BudgetAndCurve.on_step_end

    def on_step_end(self, args, state, control, **kwargs):
        control = original(self, args, state, control, **kwargs)
        if state.global_step == step:
            if how == "sigint":
                os.kill(os.getpid(), signal.SIGINT)
            else:
                raise KeyboardInterrupt
        return control

    monkeypatch.setattr(run_module._BudgetAndCurve, "on_step_end", on_step_end)


# ----------------------------------------------------------------------------------------------------- Ctrl-C


@pytest.mark.slow
@pytest.mark.parametrize("how", ["sigint", "keyboard_interrupt"])  # first Ctrl-C / second Ctrl-C (abort at once)
def test_ctrl_c_during_training_writes_the_partial_results_and_exits_130(monkeypatch, tmp_path, capsys, how):
    _plain_console(monkeypatch)
    _shrink_cli_demo(monkeypatch, curve_points=200)  # 2,000 tokens / 200 points: a validation point every step
    _ctrl_c_at_step(monkeypatch, 3, how)
    out = tmp_path / "out"
    argv = ["demo", "--rollout-tokens", "2000", "--baseline", "--output-dir", str(out)]
    code = _cli([*argv, "--cache-dir", str(tmp_path / "cache")])
    captured = capsys.readouterr()

    assert code == 130
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["interrupted"] is True
    assert list(metrics["runs"]) == ["LOO-GSPO"]  # the baseline never started
    run = metrics["runs"]["LOO-GSPO"]
    assert run["interrupted"] is True and run["after"] is None and run["steps"] == 3
    tokens = [point["rollout_tokens"] for point in run["curve"]]
    assert len(tokens) == 4 and tokens[0] == 0 and tokens == sorted(tokens)  # before + the points of steps 1-3
    assert tokens[-1] == run["rollout_tokens"] < 2000
    assert (out / "learning_curve.png").stat().st_size > 0
    assert "Traceback" not in captured.out + captured.err
    notices = [line for line in captured.out.splitlines() if "Interrupted" in line]
    assert len(notices) == 1 and str(out / "metrics.json") in notices[0] and "learning_curve.png" in notices[0]
    assert "never trained on" not in captured.out  # no before/after table for a run cut short


def test_ctrl_c_before_training_exits_130_with_one_line_and_no_cache_entry(monkeypatch, tmp_path, capsys):
    def interrupted_warm_start(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(policy_module, "supervised_warm_start", interrupted_warm_start)
    _shrink_cli_demo(monkeypatch)
    out, cache = tmp_path / "out", tmp_path / "cache"
    code = _cli(["demo", "--rollout-tokens", "300", "--output-dir", str(out), "--cache-dir", str(cache)])
    captured = capsys.readouterr()
    assert code == 130
    assert "Traceback" not in captured.out + captured.err
    assert len([line for line in captured.out.splitlines() if "Interrupted" in line]) == 1
    assert not (out / "metrics.json").exists()
    assert not cache.exists() or not any(cache.iterdir())


# ------------------------------------------------------------------------------------------------ policy cache


def _build(spec: PolicySpec, cache: Path) -> tuple[dict, list[str]]:
    messages: list[str] = []
    _, _, info = load_or_build_policy(spec, cache, log=messages.append)
    return info, messages


def _damaged_lines(messages: list[str]) -> list[str]:
    return [message for message in messages if "is damaged" in message]


def test_a_damaged_cache_entry_is_reported_in_one_line_and_rebuilt(tmp_path):
    spec = PolicySpec(**TINY_POLICY)
    info, _ = _build(spec, tmp_path)
    folder = Path(info["path"])
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])  # a truncated copy / full disk

    rebuilt, messages = _build(spec, tmp_path)
    assert rebuilt["cached"] is False
    damaged = _damaged_lines(messages)
    assert len(damaged) == 1 and str(folder) in damaged[0] and "model.safetensors" in damaged[0]
    assert _build(spec, tmp_path)[0]["cached"] is True  # the rebuilt entry loads

    for name in ("tokenizer.json", "config.json"):  # a missing file
        (folder / name).unlink()
        rebuilt, messages = _build(spec, tmp_path)
        assert rebuilt["cached"] is False and len(_damaged_lines(messages)) == 1 and name in messages[0]


def test_an_entry_without_checksums_is_checked_by_loading_it(tmp_path):
    """Entries written before the checksums existed still load; if loading fails, they are rebuilt."""
    spec = PolicySpec(**TINY_POLICY)
    folder = Path(_build(spec, tmp_path)[0]["path"])
    meta = json.loads((folder / "policy.json").read_text())
    meta.pop("files", None)
    (folder / "policy.json").write_text(json.dumps(meta))
    assert _build(spec, tmp_path)[0]["cached"] is True

    (folder / "model.safetensors").write_bytes(b"\0" * 64)
    (folder / "policy.json").write_text(json.dumps(meta))
    rebuilt, messages = _build(spec, tmp_path)
    assert rebuilt["cached"] is False and len(_damaged_lines(messages)) == 1


def test_an_interrupted_cache_write_leaves_nothing_that_would_be_loaded(tmp_path, monkeypatch):
    from transformers import PreTrainedTokenizerFast

    spec = PolicySpec(**TINY_POLICY)
    stale = tmp_path / f".addition-policy-{spec.key()}.partial-1-dead"  # left by a process killed an hour ago
    stale.mkdir()
    an_hour_ago = time.time() - 7200
    os.utime(stale, (an_hour_ago, an_hour_ago))

    def interrupted(self, *args, **kwargs):  # Ctrl-C after the weights were written, before the tokenizer
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr(PreTrainedTokenizerFast, "save_pretrained", interrupted)
        with pytest.raises(KeyboardInterrupt):
            load_or_build_policy(spec, tmp_path, log=lambda _: None)
    assert list(tmp_path.iterdir()) == []  # no entry, no staging folder (and the stale one was swept)

    info, messages = _build(spec, tmp_path)
    assert info["cached"] is False and not _damaged_lines(messages)
    assert _build(spec, tmp_path)[0]["cached"] is True


# ---------------------------------------------------------------------------------------------------- output


@pytest.mark.slow
def test_output_to_a_log_file_is_plain_lines_then_the_tables(monkeypatch, tmp_path, capsys):
    _plain_console(monkeypatch)
    run_demo(_tiny_demo(tmp_path))
    captured = capsys.readouterr()
    both = captured.out + captured.err
    assert "\r" not in both and not ANSI_ESCAPE.search(both)  # no redraws, no cursor codes (stderr included)
    assert not NAN.search(captured.out)
    lines = captured.out.splitlines()
    progress = [i for i, line in enumerate(lines) if PROGRESS_LINE.match(line)]
    assert len(progress) == 2  # one line per validation point (curve_points=2)
    tables = [i for i, line in enumerate(lines) if "┏" in line or "run summary" in line or "never trained on" in line]
    assert tables and progress[-1] < min(tables)
    assert "earlier run" not in captured.out  # a new output directory: nothing to say


@pytest.mark.slow
def test_the_terminal_progress_bar_starts_at_the_before_figure_and_stops_before_the_tables(
    monkeypatch, tmp_path, capsys
):
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # rich: treat the captured stdout as a terminal
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.delenv("TTY_INTERACTIVE", raising=False)
    run_demo(_tiny_demo(tmp_path))
    out = capsys.readouterr().out
    assert ANSI_ESCAPE.search(out)  # (the bar was drawn)
    assert not NAN.search(out)
    # the before figure (the tiny policy's 0.0) from the first frame on, labelled, with the time left
    assert "val pass (sampled) 0.00" in out and "ETA" in out
    assert out.rindex("val pass") < out.index("run summary") < out.index("never trained on")


def _earlier_run(folder: Path, interrupted: bool) -> Path:
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps({"interrupted": interrupted, "runs": {"earlier": {}}}))
    (folder / "learning_curve.png").write_bytes(b"earlier plot")
    return folder


def test_a_complete_earlier_run_is_kept_and_the_next_free_folder_is_used(tmp_path):
    out = _earlier_run(tmp_path / "out", interrupted=False)
    _earlier_run(tmp_path / "out-2", interrupted=False)
    chosen, note = prepare_output_dir(out)
    assert chosen == tmp_path / "out-3" and chosen.is_dir()
    assert str(out) in note and str(chosen) in note and "--overwrite" in note
    assert json.loads((out / "metrics.json").read_text())["runs"] == {"earlier": {}}  # untouched


def test_overwrite_and_an_interrupted_earlier_run_replace_in_place(tmp_path):
    complete = _earlier_run(tmp_path / "complete", interrupted=False)
    chosen, note = prepare_output_dir(complete, overwrite=True)
    assert chosen == complete and "--overwrite" in note
    partial = _earlier_run(tmp_path / "partial", interrupted=True)
    chosen, note = prepare_output_dir(partial)
    assert chosen == partial and "interrupted earlier run" in note
    assert prepare_output_dir(tmp_path / "fresh") == (tmp_path / "fresh", None)


def test_an_interrupted_run_in_the_next_free_folder_is_replaced_with_the_note(tmp_path):
    # issue 46: `loo-gspo-demo-2` holding an interrupted run was replaced without the note the README promises
    out = _earlier_run(tmp_path / "out", interrupted=False)
    _earlier_run(tmp_path / "out-2", interrupted=True)
    chosen, note = prepare_output_dir(out)
    assert chosen == tmp_path / "out-2"
    assert str(out) in note and f"{chosen} holds an interrupted earlier run" in note


@pytest.mark.slow
def test_a_second_demo_run_interrupted_never_destroys_the_complete_first_run(monkeypatch, tmp_path, capsys):
    _plain_console(monkeypatch)
    out = tmp_path / "out"
    first = run_demo(_tiny_demo(tmp_path))
    assert not first["interrupted"]
    before = (out / "metrics.json").read_bytes(), (out / "learning_curve.png").read_bytes()
    capsys.readouterr()
    _ctrl_c_at_step(monkeypatch, 1, "sigint")
    second = run_demo(_tiny_demo(tmp_path))
    assert second["interrupted"] and second["output_dir"] == str(tmp_path / "out-2")
    assert ((out / "metrics.json").read_bytes(), (out / "learning_curve.png").read_bytes()) == before
    assert json.loads((tmp_path / "out-2" / "metrics.json").read_text())["interrupted"] is True
    notes = [line for line in capsys.readouterr().out.splitlines() if "earlier run" in line]
    assert len(notes) == 1 and "is kept" in notes[0] and "out-2" in notes[0]


# ------------------------------------------------------------------------------------------- test isolation


def test_tests_keep_their_caches_under_the_pytest_basetemp(tmp_path_factory):
    base = tmp_path_factory.getbasetemp().resolve()
    assert default_cache_dir().resolve().is_relative_to(base)
    for name in ("TRL_LOO_GSPO_CACHE", "XDG_CACHE_HOME", "HF_HOME", "HF_DATASETS_CACHE"):
        assert Path(os.environ[name]).resolve().is_relative_to(base), name
    import datasets.config

    assert Path(datasets.config.HF_DATASETS_CACHE).resolve().is_relative_to(base)
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.environ['TRL_LOO_GSPO_CACHE'])"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert Path(child.stdout.strip()).resolve().is_relative_to(base)  # subprocesses inherit it
