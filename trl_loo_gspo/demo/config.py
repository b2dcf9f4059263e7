"""The demo's settings (:class:`DemoConfig`) and its output folder, importable without torch (the CLI's
``demo --help`` reads the defaults from here, and checks the output folder before anything is built)."""

from __future__ import annotations

import json
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class DemoConfig:
    """Settings of one demo run (the CLI's flags)."""

    output_dir: str = "loo-gspo-demo"
    seed: int = 0
    rollout_tokens: int = 700_000
    minutes: float | None = None
    baseline: bool = False
    fresh: bool = False
    cache_dir: str | None = None
    learning_rate: float = 1e-4
    prompts_per_step: int = 32
    num_generations: int = 8
    eval_samples: int = 8
    curve_points: int = 8
    digits: int = 2
    quiet: bool = False
    #: Replace a complete earlier run in ``output_dir`` instead of writing to the next free ``output_dir-N``.
    overwrite: bool = False
    # Only for tests: shrink the warm start (a tiny budget must still exercise every step of the demo).
    policy_overrides: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.minutes is None and self.rollout_tokens <= 0:
            raise ValueError("the demo needs a budget: rollout_tokens > 0 or minutes > 0")
        if self.minutes is not None and self.minutes <= 0:
            raise ValueError(f"minutes must be > 0, got {self.minutes}")


def earlier_run(output_dir: Path) -> str | None:
    """``"complete"`` or ``"interrupted"`` when ``output_dir`` holds an earlier demo run's metrics.json, else None."""
    path = output_dir / "metrics.json"
    if not path.exists():
        return None
    try:
        interrupted = json.loads(path.read_text()).get("interrupted", True)
    except (OSError, ValueError, AttributeError):  # unreadable or not a demo's metrics: nothing worth keeping
        return "interrupted"
    return "interrupted" if interrupted else "complete"


def prepare_output_dir(output_dir: str | Path, overwrite: bool = False) -> tuple[Path, str | None]:
    """The folder this run writes to, created and checked writable, and a note to print (or None).

    A complete earlier run in ``output_dir`` is never destroyed: unless ``overwrite``, this run goes to the first of
    ``output_dir-2``, ``output_dir-3``, ... that holds no complete run. An interrupted earlier run is replaced.
    Raises ``OSError`` naming the folder when it cannot be created or written.
    """
    requested = Path(output_dir)
    chosen, note = requested, None
    if earlier_run(requested) == "complete":
        if overwrite:
            note = f"Note: --overwrite: replacing the complete earlier run in {requested}."
        else:
            index = 2
            while earlier_run(chosen := requested.with_name(f"{requested.name}-{index}")) == "complete":
                index += 1
            note = (
                f"Note: {requested} holds a complete earlier run; it is kept, and this run writes to {chosen} "
                "(--overwrite replaces it instead)."
            )
            if earlier_run(chosen) == "interrupted":  # the promised note, for the folder this run does replace
                note += f" {chosen} holds an interrupted earlier run; this run replaces its metrics.json and PNG."
    elif earlier_run(requested) == "interrupted":
        note = f"Note: {requested} holds an interrupted earlier run; this run replaces its metrics.json and PNG."
    try:
        chosen.mkdir(parents=True, exist_ok=True)
        probe = chosen / f".write-check-{uuid.uuid4().hex[:8]}"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise OSError(f"cannot write the demo's results to --output_dir {chosen}: {reason}") from error
    if not os.access(chosen, os.W_OK):  # pragma: no cover - the probe above already failed
        raise OSError(f"cannot write the demo's results to --output_dir {chosen}")
    return chosen, note
