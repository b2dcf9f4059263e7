"""Output past the sandbox's cap (issue #45): debug output is truncated, not a failure, where nothing reads it.

In mode ``tests`` the verdicts come on the result channel; stdout and stderr are only excerpts, so past
``output_bytes`` they are counted and dropped (``SandboxRun.truncated``). In mode ``io`` stdout is the answer: a
prefix must never be compared (``"A" * cap`` expected, ``"A" * cap + "B"`` printed), so it still ends the run.
A runaway past ``output_total_bytes`` still ends any run, and the host reads a bounded amount.
"""

from __future__ import annotations

import os
import resource

import pytest

from trl_loo_gspo.sandbox.bubblewrap import Sandbox, SandboxLimits
from trl_loo_gspo.verifiers.code.test_plan import plan_test
from trl_loo_gspo.verifiers.code.verifier import CodeVerifier

from .helpers import small_sandbox_limits
from .test_sandbox_hardening import needs_bwrap, run_io

CAP = small_sandbox_limits().output_bytes  # 64 KiB in the tests' limits
TESTS = ["assert f(2) == 4", "assert f(-3) == -6"]
#: 200,000 lines of debug output per call (~3.9 MB: 60 times the tests' cap, 4 times the default 1 MiB)
DEBUG = "import sys\ndef f(x):\n    for i in range(200_000):\n        print('debug line', i, x, file={stream})\n"


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"


def config_of(program: str, test: str) -> dict:
    """A mode-``tests`` run of ``program`` on one test calling ``f``, as the verifier builds it."""
    plan = plan_test(test, ("f",), (), ()).wire()
    return {"mode": "tests", "program": program, "tests": [plan], "n_tests": 1, "nonce": os.urandom(16).hex()}


@pytest.fixture(scope="module")
def verifier() -> CodeVerifier:
    return CodeVerifier(limits=small_sandbox_limits(wall_timeout_s=10.0, cpu_time_s=10), max_workers=2)


@needs_bwrap
@pytest.mark.parametrize("stream", ["sys.stdout", "sys.stderr"])
def test_debug_output_in_tests_is_truncated_not_failed(verifier, stream):
    right = verifier.verify(fenced(DEBUG.format(stream=stream) + "    return 2 * x\n"), tests=TESTS)
    assert (right.score, right.status) == (1.0, "pass"), right.details
    assert right.details["tests_run"]["limit_hit"] is None
    wrong = verifier.verify(fenced(DEBUG.format(stream=stream) + "    return 2 * x + 1\n"), tests=TESTS)
    assert wrong.score == 0.0 and [c["reason"] for c in wrong.details["checks"]] == ["AssertionError"] * 2


@needs_bwrap
def test_truncation_is_counted_and_flagged():
    box = Sandbox(small_sandbox_limits(wall_timeout_s=10.0, cpu_time_s=10))
    program = DEBUG.format(stream="sys.stdout") + "    return 2 * x\nprint('x' * 100, file=sys.stderr)\n"
    run = box.run(config_of(program, "assert f(2) == 4"))
    assert run.limit_hit is None and not run.output_exceeded and run.returncode == 0, run.stderr[-500:]
    assert run.truncated == ("stdout",) and len(run.stdout) == CAP
    assert run.stdout_bytes == sum(len(f"debug line {i} 2\n") for i in range(200_000))  # every byte counted
    assert run.stdout.startswith(b"debug line 0 2\ndebug line 1 2\n")  # the first output_bytes are kept
    assert run.stderr_bytes == 101 and run.stderr == b"x" * 100 + b"\n" and "stdout_tail" in run.extra
    assert b"DONE 1" in run.channel


@needs_bwrap
def test_io_stdout_past_the_cap_still_fails_even_when_its_prefix_is_the_answer(verifier):
    expected = "A" * (CAP - 1)  # the whole answer fits under the cap; the program prints more after it
    longer = f"import sys\nsys.stdout.write({expected!r} + '\\n' + 'B' * 10)\n"
    result = verifier.verify(fenced(longer), io_cases=[{"input": "", "output": expected}])
    assert result.score == 0.0 and result.details["checks"][0]["reason"] == "output"
    exact = f"import sys\nsys.stdout.write({expected!r} + '\\n')\n"
    assert verifier.verify(fenced(exact), io_cases=[{"input": "", "output": expected}]).score == 1.0


@needs_bwrap
def test_io_stderr_debug_is_truncated_and_the_answer_decides(verifier):
    program = "import sys\nn = int(input())\nfor i in range(200_000):\n    print('debug', i, file=sys.stderr)\n"
    right = verifier.verify(fenced(program + "print(2 * n)\n"), io_cases=[{"input": "21", "output": "42"}])
    assert right.score == 1.0, right.details
    wrong = verifier.verify(fenced(program + "print(2 * n + 1)\n"), io_cases=[{"input": "21", "output": "42"}])
    assert wrong.score == 0.0 and wrong.details["checks"][0]["reason"] == "wrong output"


@needs_bwrap
def test_a_runaway_still_ends_the_run_and_host_work_stays_bounded():
    limits = small_sandbox_limits(wall_timeout_s=10.0, cpu_time_s=10, output_total_bytes=8 << 20)
    box = Sandbox(limits)
    for stream in ("stdout", "stderr"):
        before = resource.getrusage(resource.RUSAGE_SELF)
        program = f"import sys\nchunk = 'x' * (1 << 20)\nwhile True:\n    sys.{stream}.write(chunk)\n"
        run = box.run(config_of(program, "assert f() == 1"))
        after = resource.getrusage(resource.RUSAGE_SELF)
        assert run.limit_hit == "output" and run.extra["output_stream"] == stream, (stream, run.limit_hit)
        assert getattr(run, f"{stream}_bytes") <= limits.output_total_bytes + (1 << 16)  # read at most one chunk on
        assert len(getattr(run, stream)) == CAP and run.wall_s < 5
        host_cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        assert host_cpu < 2.0, host_cpu


@needs_bwrap
def test_memory_error_after_truncated_stderr_is_still_named():
    box = Sandbox(small_sandbox_limits())
    program = "import sys\nsys.stderr.write('e' * (3 * 65536))\nsys.stderr.flush()\nraise MemoryError\n"
    run = run_io(box, program)
    assert run.truncated == ("stderr",) and run.returncode == 1
    assert run.limit_hit == "memory"  # read from the end of what stderr carried, not from the kept prefix


def test_limits_keep_their_defaults():
    limits = SandboxLimits()
    assert (limits.output_bytes, limits.output_total_bytes) == (1 << 20, 64 << 20)
