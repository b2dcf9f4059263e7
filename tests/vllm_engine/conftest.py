"""Defaults of the vLLM CI job's settings (its own values win): loopback address, a small fixed KV cache, vLLM's
caches under pytest's temporary folder.

Also imported by the main test venv (no vLLM): it sets variables only, and only for the tests of this folder.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session", autouse=True)
def vllm_environment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    defaults = {
        "VLLM_HOST_IP": "127.0.0.1",  # else the engine's message queue advertises a non-loopback address
        "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB, instead of a fraction of the machine's RAM
        "VLLM_CACHE_ROOT": str(tmp_path_factory.mktemp("vllm_cache")),
        "HF_HUB_OFFLINE": "1",  # local folders only
        "TRL_EXPERIMENTAL_SILENCE": "1",
    }
    with pytest.MonkeyPatch.context() as patch:
        for name, value in defaults.items():
            if name not in os.environ:  # the CI job's own settings win
                patch.setenv(name, value)
        yield
