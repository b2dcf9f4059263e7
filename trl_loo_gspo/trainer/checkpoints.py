"""A checkpoint checked before training resumes from it: a damaged file is named with its folder, in one message.

transformers loads a checkpoint's files one by one while ``train()`` starts, and a damaged one surfaces as the raw
error of whichever library reads it (a corrupt ``optimizer.pt`` makes torch suggest ``weights_only=False``, which
would unpickle arbitrary code). :func:`check_checkpoint` reads every file first without unpickling anything: JSON
files parse, safetensors headers and sizes agree, torch's zip archives pass their CRC check. A problem raises
:class:`CheckpointError` naming the checkpoint folder and the file.
"""

from __future__ import annotations

import json
import os
import struct
import zipfile
from pathlib import Path

#: Suffixes of files written by ``torch.save`` (zip archives since torch 1.6).
TORCH_SUFFIXES = (".pt", ".pth", ".bin")


class CheckpointError(ValueError):
    """A checkpoint folder that cannot be resumed from; the message names the folder and the file."""


def _safetensors_problem(path: Path) -> str | None:
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return "shorter than a safetensors header"
        (length,) = struct.unpack("<Q", head)
        if length > size - 8:
            return "truncated (its header is longer than the file)"
        try:
            header = json.loads(f.read(length))
        except ValueError:
            return "its safetensors header is not valid JSON"
    ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)]
    if ends and 8 + length + max(ends) > size:
        return f"truncated ({size:,} bytes, its header describes {8 + length + max(ends):,})"
    return None


def _problem(path: Path) -> str | None:
    """What is wrong with one checkpoint file, or None."""
    try:
        if path.suffix == ".json":
            json.loads(path.read_text())
        elif path.suffix == ".safetensors":
            return _safetensors_problem(path)
        elif path.suffix in TORCH_SUFFIXES:
            if not zipfile.is_zipfile(path):
                return "not a torch.save archive (truncated or overwritten)"
            with zipfile.ZipFile(path) as archive:
                bad = archive.testzip()
            if bad is not None:
                return f"its entry {bad} fails its CRC check"
    except (OSError, ValueError, zipfile.BadZipFile, UnicodeDecodeError) as error:
        return " ".join(str(error).split()) or type(error).__name__
    return None


def check_checkpoint(checkpoint: str | os.PathLike) -> Path:
    """Raise :class:`CheckpointError` unless ``checkpoint`` is a folder whose files all read back; returns it."""
    folder = Path(checkpoint)
    if not folder.is_dir():
        raise CheckpointError(f"resume_from_checkpoint: {folder} is not a checkpoint folder (no such directory)")
    if not (folder / "trainer_state.json").exists():
        raise CheckpointError(
            f"resume_from_checkpoint: {folder} has no trainer_state.json, so it is not a checkpoint-* folder of a run"
        )
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        problem = _problem(path)
        if problem is not None:
            raise CheckpointError(
                f"checkpoint {folder}: {path.relative_to(folder)} is damaged ({problem}). Resume from an earlier "
                "checkpoint-* folder, or start afresh without resume_from_checkpoint."
            )
    return folder


def resolve_checkpoint(resume_from_checkpoint: str | bool | None, output_dir: str) -> str | None:
    """The folder ``train(resume_from_checkpoint=...)`` resumes from (``True``: the last one in ``output_dir``),
    checked by :func:`check_checkpoint`; None when not resuming."""
    if resume_from_checkpoint is None or resume_from_checkpoint is False:
        return None
    if resume_from_checkpoint is True or str(resume_from_checkpoint).lower() == "true":
        from transformers.trainer_utils import get_last_checkpoint

        last = get_last_checkpoint(output_dir) if os.path.isdir(output_dir) else None
        if last is None:
            raise CheckpointError(f"resume_from_checkpoint=True: no checkpoint-* folder in output_dir {output_dir}")
        resume_from_checkpoint = last
    return str(check_checkpoint(resume_from_checkpoint))
