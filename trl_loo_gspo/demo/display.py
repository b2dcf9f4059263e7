"""Where the demo's training progress goes: a rich progress bar on an interactive terminal, one plain line per
validation point in a log file or a pipe (no redraws, no escape codes), nothing with ``--quiet``."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass


def fmt(value: float | None, digits: int = 2) -> str:
    """A figure for the display: ``—`` when it is not known (yet)."""
    return "—" if value is None or math.isnan(value) else f"{value:.{digits}f}"


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def _eta(status: Status) -> str:
    """``  ETA h:mm:ss`` from the budget fraction done so far (empty before any progress or once done)."""
    if not 0.0 < status.fraction < 1.0:
        return ""
    return f"  ETA {_clock(status.seconds * (1.0 - status.fraction) / status.fraction)}"


@dataclass
class Status:
    """What the training display shows after a step."""

    tokens: int
    fraction: float  # of the budget
    reward: float | None  # the latest step's mean reward (None before the first step is logged)
    point: dict  # the latest validation point: the before-training figures until the first curve point
    seconds: float


class Display:
    """Where training progress goes; this base class shows nothing (``--quiet``)."""

    def __init__(self, console, name: str) -> None:
        self.console, self.name = console, name

    def __enter__(self) -> Display:
        return self

    def __exit__(self, *exc_info) -> None:
        pass

    def show(self, status: Status, new_point: bool) -> None:
        pass


class BarDisplay(Display):
    """A rich progress bar, redrawn in place (interactive terminals only)."""

    def __init__(self, console, name: str, before: dict) -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        super().__init__(console, name)
        columns = [
            TextColumn(f"[bold]{name}"),
            BarColumn(),
            TextColumn("{task.fields[tokens]:,} rollout tokens"),
            TextColumn("reward {task.fields[reward]}"),
            TextColumn("val pass (sampled) {task.fields[pass_rate]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
        ]
        self.progress = Progress(*columns, console=console, transient=False)
        self.task_id = self.progress.add_task(
            name, total=1.0, tokens=0, reward=fmt(None), pass_rate=fmt(before["sampled"])
        )

    def __enter__(self) -> BarDisplay:
        self.progress.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self.progress.stop()

    def show(self, status: Status, new_point: bool) -> None:
        self.progress.update(
            self.task_id,
            completed=min(status.fraction, 1.0),
            tokens=status.tokens,
            reward=fmt(status.reward),
            pass_rate=fmt(status.point["sampled"]),
        )


class LineDisplay(Display):
    """One plain line per validation point: no redraws, for log files and pipes."""

    def __enter__(self) -> LineDisplay:
        self.console.print(f"{self.name}: training (one line per validation point)", soft_wrap=True, markup=False)
        return self

    def show(self, status: Status, new_point: bool) -> None:
        if not new_point:
            return
        point = status.point
        self.console.print(
            f"{self.name} {100 * min(status.fraction, 1.0):3.0f}%  {status.tokens:,} rollout tokens  "
            f"reward {fmt(status.reward)}  val pass {fmt(point['sampled'], 3)} sampled, "
            f"{fmt(point['greedy'], 3)} greedy  {_clock(status.seconds)}{_eta(status)}",
            soft_wrap=True,
            markup=False,
            highlight=False,
        )


def is_interactive(console) -> bool:
    """Whether the console is a terminal that can redraw a progress bar (not a log file, a pipe or TERM=dumb)."""
    fallback = console.is_terminal and not console.is_dumb_terminal
    return bool(getattr(console, "is_interactive", fallback))


def make_display(console, name: str, before: dict, quiet: bool) -> Display:
    if quiet:
        return Display(console, name)
    if is_interactive(console):
        return BarDisplay(console, name, before)
    return LineDisplay(console, name)


def make_console(quiet: bool):
    """The demo's console; not on a terminal, 120 columns wide (unless $COLUMNS says otherwise) so tables fit."""
    from rich.console import Console

    console = Console(quiet=quiet)
    if not is_interactive(console) and "COLUMNS" not in os.environ:
        console.width = 120
    return console
