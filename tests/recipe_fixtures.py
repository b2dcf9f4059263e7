"""Offline stand-ins for the recipes' Hub resources: a tiny local model directory and raw-format data files
(shipped in the package: :mod:`trl_loo_gspo.demo.local`, ``trl-loo-gspo local-setup``).

The recipes name Hub models and datasets; tests override ``model_name_or_path`` with a tiny Qwen2 saved here and
``dataset_name`` with a JSONL file in the public dataset's exact raw format (so the recipe's mapper runs unchanged).
"""

from __future__ import annotations

from pathlib import Path

from trl_loo_gspo.demo.local import (  # noqa: F401 (re-exported for the tests)
    CHAT_TEMPLATE,
    RAW_ROWS,
    cpu_overrides,
    save_tiny_model,
    write_raw,
)

REPO = Path(__file__).resolve().parents[1]
RECIPES = sorted((REPO / "recipes").glob("*-lora.yaml"))


def data_override(recipe: Path, directory: Path) -> list[str]:
    """The recipe's Hub dataset replaced by a local raw-format file (the proofs recipe ships its data)."""
    text = recipe.read_text()
    for task in RAW_ROWS:
        if f"task: {task}\n" in text:
            # one local file has no test split: hold out validation rows (no prompt on both sides)
            return ["--dataset_name", str(write_raw(directory, task)), "--validation_size", "2"]
    return []
