"""Session-wide test settings: every cache the package writes lands in pytest's temporary directory.

The demo policies (``trl_loo_gspo.demo.policy.default_cache_dir``: ``$TRL_LOO_GSPO_CACHE``, else
``$XDG_CACHE_HOME/trl_loo_gspo``), the Hugging Face caches (``datasets.load_dataset`` of local JSON files writes
under ``$HF_DATASETS_CACHE``) and matplotlib's font cache (``$XDG_CACHE_HOME``) are pointed at a folder under the
pytest basetemp, so no test writes under the real ``~/.cache``. Subprocesses started by tests inherit these
variables through ``os.environ``.

DeepSpeed's JIT-built ops (``tests/test_engines.py``: the first launch builds one, minutes on 2 cores) go to
``$TORCH_EXTENSIONS_DIR`` when it is set (CI sets it to ``.ci-cache/torch_extensions`` in the checkout, a cache kept
between runs), else to ``<basetemp>/caches/torch_extensions``: one build shared by every launch of the session, never
a shared path under ``/tmp``.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


def _cache_environment(root: Path) -> dict[str, Path]:
    return {
        "TRL_LOO_GSPO_CACHE": root / "trl_loo_gspo",
        "XDG_CACHE_HOME": root / "xdg",
        "HF_HOME": root / "huggingface",
        "HF_DATASETS_CACHE": root / "huggingface" / "datasets",
    }


@pytest.fixture(scope="session", autouse=True)
def caches_in_tmp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Point every cache location at ``<basetemp>/caches`` for the whole session (restored afterwards)."""
    root = tmp_path_factory.mktemp("caches", numbered=False)
    environment = _cache_environment(root)
    with pytest.MonkeyPatch.context() as patch:
        for name, path in environment.items():
            patch.setenv(name, str(path))
        if not os.environ.get("TORCH_EXTENSIONS_DIR"):
            patch.setenv("TORCH_EXTENSIONS_DIR", str(root / "torch_extensions"))
        datasets_config = sys.modules.get("datasets.config")
        if datasets_config is not None:  # read from the environment at import (test modules import datasets)
            cache = environment["HF_DATASETS_CACHE"]
            patch.setattr(datasets_config, "HF_DATASETS_CACHE", cache)
            patch.setattr(datasets_config, "DOWNLOADED_DATASETS_PATH", cache / "downloads")
            patch.setattr(datasets_config, "EXTRACTED_DATASETS_PATH", cache / "downloads" / "extracted")
        yield root
