"""What the program's process holds (issue 33): in tests mode exactly stdio and its two pipes to the judge, at
import time and when called; in io mode exactly stdio; and it is not dumpable (PR_GET_DUMPABLE 0). Before, the
runner's code descriptor (an unlinked temporary file, readable) stayed open in both."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from trl_loo_gspo.sandbox.bubblewrap import Sandbox
from trl_loo_gspo.verifiers import CodeVerifier

from .helpers import small_sandbox_limits

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="needs bubblewrap (CI installs it)")

INVENTORY = '''
import os


def _inventory():
    """Descriptors above stdio: "pipe", or what they point to (the listing's own descriptor left out)."""
    out = []
    for name in sorted(os.listdir("/proc/self/fd"), key=int):
        try:
            target = os.readlink("/proc/self/fd/" + name)
        except OSError:
            continue
        if int(name) > 2 and not target.startswith("/proc/"):
            out.append("pipe" if target.startswith("pipe:") else target)
    return out
'''
PROGRAM = (
    "```python\n"
    + INVENTORY
    + """
AT_IMPORT = _inventory()


def at_import():
    return AT_IMPORT


def when_called():
    return _inventory()


def dumpable():
    import ctypes

    return ctypes.CDLL(None, use_errno=True).prctl(3, 0, 0, 0, 0)
```"""
)


@pytest.fixture(scope="module")
def verifier():
    return CodeVerifier()


@pytest.mark.parametrize(
    "test",
    [
        "assert at_import() == ['pipe', 'pipe']",
        "assert when_called() == ['pipe', 'pipe']",
        "assert dumpable() == 0",
    ],
)
def test_the_programs_process_in_tests_mode(verifier, test):
    result = verifier.verify(PROGRAM, tests=[test])
    assert result.score == 1.0, result.details


def test_the_programs_process_in_io_mode():
    program = INVENTORY + "\nimport json\nprint(json.dumps(_inventory()))\n"
    run = Sandbox(small_sandbox_limits()).run(
        {"mode": "io", "program": program, "stdin": "", "nonce": os.urandom(16).hex()}
    )
    assert run.error is None and run.returncode == 0, run.stderr.decode()[-2000:]
    assert json.loads(run.stdout.decode().strip().splitlines()[-1]) == []


DUMPABLE_CHECK = """
import ctypes, json
results = {}
class Refusing:  # a kernel (or seccomp filter) where prctl fails: the flag stays 1
    def __init__(self, *args, **kwargs):
        pass
    def prctl(self, option, *args):
        return -1 if option == 4 else 1
real = ctypes.CDLL
ctypes.CDLL = Refusing
from trl_loo_gspo.sandbox.runner import _not_dumpable
results["refused"] = _not_dumpable(False)
ctypes.CDLL = real
results["real"] = _not_dumpable(False)
print(json.dumps(results))
"""


def test_the_runner_verifies_it_is_not_dumpable():
    """In a child interpreter (it makes itself non-dumpable): the runner's check reports a prctl that did not take
    (the runner then refuses to run the program: ``ERROR still-dumpable``), and a real one that did."""
    root = Path(__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    done = subprocess.run([sys.executable, "-c", DUMPABLE_CHECK], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"refused": False, "real": True}
