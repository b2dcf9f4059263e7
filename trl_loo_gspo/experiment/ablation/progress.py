"""What ``trl-loo-gspo ablate`` prints while it trains, readable with several workers on one plan (:mod:`.claims`).

* **Not a terminal** (stdout is a log file or a pipe): plain lines, no redraws and no escape codes — one when each
  phase starts (sweep, study, common rate: how many runs, how many finished earlier), one per run *this* worker
  finishes (its pass rate, tokens and time), one when it waits for other workers or leaves the last runs to them.
  Each worker prints only its own runs, so workers writing to one file print every run once.
* **A terminal**: one live display per terminal. The worker holding the terminal's display lock (a file lock in the
  temporary directory, named after the terminal device: the first worker started there) draws the progress of the
  whole plan — finished runs whoever trained them, its own run's rollout tokens — and a line per finished run, the
  other workers' runs included (read from their records). The other workers on that terminal print nothing while it
  draws; when it ends, the next one to check (every few seconds while it trains) takes the display over.
* **The report** (whichever worker finds every run finished): a line naming the files the report writes
  (:data:`.report.REPORT_FILES`) before the curve fits and plots, then one naming each file written.

What a run prints on stdout while it trains (the trainer's objective line) is left out and its end-of-run table is not
printed (the record has the run's settings and figures); warnings, on stderr, are left alone.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

#: The titles of the runner's phases.
PHASES = {"tuning": "sweep", "validation": "study", "common": "common rate"}


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def is_terminal(stream) -> bool:
    """Whether ``stream`` is a terminal that can redraw a display (``isatty()``, not ``TERM=dumb``)."""
    try:
        return bool(stream.isatty()) and os.environ.get("TERM") != "dumb"
    except (AttributeError, ValueError):
        return False


def display_lock_path(stream) -> Path | None:
    """The display lock of the terminal ``stream`` writes to (one per terminal device and user), or None."""
    try:
        device = os.fstat(stream.fileno()).st_rdev
    except (AttributeError, OSError, ValueError):
        return None
    user = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"trl-loo-gspo-ablate-display-{user}-{device}.lock"


def run_line(phase: str, done: int, total: int, label: str, record: dict, seconds: float | None, split: str) -> str:
    """``study 4/18  loo seed 1: validation pass rate 0.412 (best 0.430), 1,024 rollout tokens, 0:41``."""
    final, best = record.get("final_pass_rate"), record.get("best_pass_rate")
    score = f"{split} pass rate {final:.3f}" if isinstance(final, int | float) else "finished"
    if isinstance(best, int | float) and isinstance(final, int | float) and best != final:
        score += f" (best {best:.3f})"
    tokens = record.get("generated_tokens")
    parts = [score]
    if isinstance(tokens, int | float):
        parts.append(f"{tokens:,.0f} rollout tokens")
    if seconds is not None:
        parts.append(_clock(seconds))
    width = len(str(total))
    return f"{phase} {done:>{width}}/{total}  {label}: {', '.join(parts)}"


class _Discard(io.TextIOBase):
    """A text stream that keeps nothing."""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        return len(text)


class AblationProgress:
    """The ablation's display (module docstring). ``stream``: where it prints (default ``sys.stdout``);
    ``lock_path``: the terminal's display lock (default: from the terminal device; ``None``: no lock, this worker
    draws); ``poll_seconds``: how often a drawing worker looks for other workers' finished runs, and a silent one for
    a display to take over."""

    def __init__(self, stream=None, lock_path: Path | str | None = "terminal", poll_seconds: float = 3.0) -> None:
        self.stream = stream if stream is not None else sys.stdout
        self.terminal = is_terminal(self.stream)
        self.lock_path = display_lock_path(self.stream) if lock_path == "terminal" else lock_path
        self.poll_seconds = poll_seconds
        self.mode = "lines"  # "lines" (not a terminal), "live" (draws), "silent" (another worker draws)
        self._lock = None
        self._progress = None
        self._overall = None
        self._current = None  # (label, budget, tokens, started, rich task id or None)
        self._phase, self._split, self._jobs = "", "validation", []
        self._seen: set[Path] = set()
        self._waiting_said = False
        self._last_poll = 0.0

    # ------------------------------------------------------------------------------------------------ lifecycle
    def __enter__(self) -> AblationProgress:
        if self.terminal:
            self.mode = "live" if self._take_lock() else "silent"
            if self.mode == "live":
                self._start_live()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop_live()
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _take_lock(self) -> bool:
        if self.lock_path is None:
            return True
        from filelock import FileLock, Timeout

        lock = FileLock(str(self.lock_path), timeout=0)
        try:
            lock.acquire()
        except Timeout:
            return False
        except OSError:  # a temporary directory that cannot be written: draw (no other worker can coordinate)
            return True
        self._lock = lock
        return True

    def _start_live(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        console = Console(file=self.stream, force_terminal=True)
        self._progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed:,.0f}/{task.total:,.0f} {task.fields[unit]}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,  # the lines above it stay; the bars go when it stops
        )
        self._progress.start()
        if self._jobs:
            self._add_tasks()

    def _add_tasks(self) -> None:
        self._overall = self._progress.add_task(
            f"{self._phase}: finished", total=len(self._jobs), completed=self._count(), unit="runs"
        )
        if self._current is not None:
            label, budget, tokens, started, _ = self._current
            task = self._progress.add_task(label, total=budget, completed=tokens, unit="rollout tokens")
            self._current = (label, budget, tokens, started, task)

    def _stop_live(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None

    def say(self, text: str) -> None:
        """One line: above the live display, plain in a log file, nothing while another worker draws."""
        if self.mode == "silent":
            return
        if self._progress is not None:
            self._progress.console.print(text, markup=False, highlight=False, soft_wrap=True)
        else:
            self.stream.write(text + "\n")  # one write per line: the lines of several workers do not mix
            self.stream.flush()

    # ------------------------------------------------------------------------------------------------- phases
    def _count(self) -> int:
        return sum(1 for _, path in self._jobs if path.exists())

    def phase(self, split: str, jobs: list[tuple[str, Path]], budget: int, common: bool = False) -> None:
        """A phase starts: ``jobs`` are its runs as (label, record path)."""
        self._phase = PHASES["common" if common else split]
        self._split, self._jobs = split, list(jobs)
        self._seen = {path for _, path in self._jobs if path.exists()}
        self._waiting_said = False
        done = len(self._seen)
        what = f"{len(self._jobs)} runs of {budget:,} rollout tokens, scored on the {split} split"
        how = "" if self.mode != "lines" else f"; worker {os.getpid()} prints one line per run it finishes"
        self.say(f"{self._phase}: {what}: {done} finished, {len(self._jobs) - done} to train{how}")
        if self._progress is not None:
            if self._overall is not None:
                self._progress.remove_task(self._overall)
            self._overall = self._progress.add_task(
                f"{self._phase}: finished", total=len(self._jobs), completed=done, unit="runs"
            )

    def start(self, label: str, budget: int):
        """This worker starts a run; returns the callback that receives its rollout tokens."""
        task = None
        if self._progress is not None:
            task = self._progress.add_task(label, total=budget, completed=0, unit="rollout tokens")
        self._current = (label, budget, 0, time.perf_counter(), task)
        return self.tokens

    @contextlib.contextmanager
    def training(self) -> Iterator[None]:
        """While a run trains: what it prints on stdout (the trainer's objective line; its settings are in the record)
        is left out, so that a log file has one line per run and a silent worker stays silent. Warnings (stderr) are
        left alone."""
        with contextlib.redirect_stdout(_Discard()):
            yield

    def tokens(self, count: int) -> None:
        if self._current is None:
            return
        label, budget, _, started, task = self._current
        self._current = (label, budget, count, started, task)
        if self._progress is not None and task is not None:
            self._progress.update(task, completed=min(count, budget))
        if time.monotonic() - self._last_poll >= self.poll_seconds:
            self.poll()

    def finish(self, label: str, path: Path, record: dict) -> None:
        """This worker wrote the record of a run."""
        seconds = None
        if self._current is not None:
            *_, started, task = self._current
            seconds = time.perf_counter() - started
            if self._progress is not None and task is not None:
                self._progress.remove_task(task)
        self._current = None
        if self.mode == "live":
            self._others(exclude=path)  # the runs other workers finished meanwhile first: the count goes up by one
        self._seen.add(path)
        done = len(self._seen) if self.mode == "live" else self._count()
        self.say(run_line(self._phase, done, len(self._jobs), label, record, seconds, self._split))
        if self._progress is not None and self._overall is not None:
            self._progress.update(self._overall, completed=self._count())

    def stopped(self) -> None:
        """This worker's run ended without a record (an error, Ctrl-C)."""
        if self._current is not None and self._progress is not None and self._current[-1] is not None:
            self._progress.remove_task(self._current[-1])
        self._current = None

    def poll(self) -> None:
        """Take the display over if its worker ended; while drawing, add the runs other workers finished."""
        self._last_poll = time.monotonic()
        if self.mode == "silent" and self._take_lock():
            self.mode = "live"
            self._seen = {path for _, path in self._jobs if path.exists()}
            self.say(f"(the worker that drew this display has ended: worker {os.getpid()} draws it now)")
            self._start_live()
            return
        if self.mode != "live":
            return
        self._others()
        if self._progress is not None and self._overall is not None:
            self._progress.update(self._overall, completed=self._count())

    def _others(self, exclude: Path | None = None) -> None:
        """A line for each run another worker finished since the last look (read from its record)."""
        for label, path in self._jobs:
            if path in self._seen or path == exclude or not path.exists():
                continue
            self._seen.add(path)
            try:
                record = json.loads(path.read_text())
            except (OSError, ValueError):
                record = {}
            line = run_line(self._phase, len(self._seen), len(self._jobs), label, record, None, self._split)
            seconds = record.get("seconds")
            trained = f", {_clock(seconds)} training" if isinstance(seconds, int | float) else ""
            self.say(f"{line}{trained} (another worker)")

    def waiting(self, left: int) -> None:
        """Every remaining sweep run is held by other workers; this one waits for them (said once per phase)."""
        self.poll()
        if not self._waiting_said:
            self._waiting_said = True
            self.say(
                f"{self._phase}: waiting for {left} run{'s' if left != 1 else ''} other workers are training "
                "(the learning-rate choice needs every sweep run)"
            )

    def left_to_others(self, left: int) -> None:
        """This worker has no run left to train; other workers are training ``left`` runs and will report."""
        self.poll()
        who = "This worker" if self.mode == "live" else f"Worker {os.getpid()}"  # (several may write to one file)
        self.say(
            f"{who} is done: {left} run{'s are' if left != 1 else ' is'} still being trained by other workers; "
            "the last one to finish writes the report."
        )

    # ------------------------------------------------------------------------------------------------- report
    def report_phase(self, out_dir: Path, names: list[str]) -> float:
        """The report is about to be written to ``out_dir``: stop drawing, say which files; returns the start time."""
        self._stop_live()
        if self.mode == "silent":  # every run is finished: the worker that drew has nothing left to draw
            self.mode = "lines"
        self.say(f"Writing the report to {out_dir}/ (the curve fits can take a minute or two): {', '.join(names)}")
        return time.perf_counter()

    def wrote(self, out_dir: Path, paths: list[Path], started: float) -> None:
        names = ", ".join(str(p.relative_to(out_dir)) if p.is_relative_to(out_dir) else str(p) for p in paths)
        self.say(f"Wrote {out_dir}/: {names} (in {_clock(time.perf_counter() - started)})")
