"""The verifiers as a standalone reward library (issue 33): a fresh interpreter imports ``trl_loo_gspo.verifiers``
and its public verifiers without torch, transformers, TRL or any other heavy library; the trainer's top-level names
still import on first use."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "transformers", "trl", "datasets", "accelerate", "peft", "numpy", "scipy", "matplotlib", "sympy")

PROBE = f"""
import json, sys, time
start = time.perf_counter()
import trl_loo_gspo.verifiers
from trl_loo_gspo.verifiers import CodeVerifier, CoqVerifier, MathVerifier, Verifier, VerifierResult
from trl_loo_gspo.verifiers.adapters import verl_compute_score
seconds = time.perf_counter() - start
print(json.dumps({{"seconds": seconds, "heavy": [m for m in {HEAVY!r} if m in sys.modules],
                   "file": trl_loo_gspo.__file__}}))
"""


def _probe(code: str) -> dict:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_fresh_interpreter_imports_the_verifiers_without_heavy_libraries() -> None:
    result = _probe(PROBE)
    assert Path(result["file"]).resolve().parent == ROOT / "trl_loo_gspo"  # this checkout's package
    assert result["heavy"] == [], result
    # the time is reported, not asserted (no wall-clock thresholds in tests): about 0.2 s on an idle 2-core machine
    print(f"import trl_loo_gspo.verifiers: {result['seconds']:.3f} s")


@pytest.mark.slow
def test_the_trainer_names_still_import_from_the_top_level() -> None:
    code = (
        "import json, sys\nimport trl_loo_gspo\nfrom trl_loo_gspo import LooGspoConfig, LooGspoTrainer\n"
        "import trl\nassert issubclass(LooGspoTrainer, trl.GRPOTrainer)\n"
        "assert trl_loo_gspo.algorithms.losses.LOSSES\n"
        "assert {'LooGspoConfig', 'LooGspoTrainer', 'algorithms'} <= set(dir(trl_loo_gspo))\n"
        "try:\n    trl_loo_gspo.no_such_name\nexcept AttributeError as error:\n    message = str(error)\n"
        "print(json.dumps({'message': message, 'torch': 'torch' in sys.modules}))"
    )
    result = _probe(code)
    assert result["torch"] and "no_such_name" in result["message"]
