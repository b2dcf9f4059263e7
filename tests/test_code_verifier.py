"""CodeVerifier: scoring, extraction, and a hostile suite against the bubblewrap sandbox (method §2.1)."""

from __future__ import annotations

import os
import random
import re
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from trl_loo_gspo.sandbox import bubblewrap as sandbox_module
from trl_loo_gspo.verifiers.code.verifier import (
    CodeVerifier,
    _unterminated_python,
    code_bounds,
    extract_code,
    normalize_output,
)

from .helpers import small_sandbox_limits as small_limits

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None,
    reason="bubblewrap (bwrap) is not installed: apt-get install bubblewrap (CI installs it)",
)

REPO = Path(__file__).resolve().parent.parent
HOME = Path.home()


@pytest.fixture(scope="module")
def verifier() -> CodeVerifier:
    return CodeVerifier(limits=small_limits(), max_workers=2)


def fenced(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}\n```\n"


DOUBLE = "def f(x):\n    return 2 * x\n"
TESTS = ["assert f(2) == 4", "assert f(0) == 0", "assert f(-3) == -6"]


# -- plain scoring -------------------------------------------------------------------------------------------


def test_correct_program_passes(verifier):
    result = verifier.verify(fenced(DOUBLE), tests=TESTS)
    assert (result.score, result.status, result.anomaly) == (1.0, "pass", None)
    assert result.details["compiles"] is True and result.details["passed"] == 3


def test_wrong_program_fails(verifier):
    result = verifier.verify(fenced("def f(x):\n    return x + 2\n"), tests=TESTS)
    assert (result.score, result.status) == (0.0, "fail")
    reasons = [c["reason"] for c in result.details["checks"]]
    assert reasons == ["passed", "AssertionError", "AssertionError"]


def test_partial_credit():
    v = CodeVerifier(limits=small_limits(), partial_credit=True)
    result = v.verify(fenced("def f(x):\n    return x + 2\n"), tests=TESTS)
    assert result.score == pytest.approx(1 / 3) and result.status == "partial"


def test_io_cases(verifier):
    code = "import sys\nnums = list(map(int, sys.stdin.read().split()))\nprint(sum(nums))\nprint('done')  \n"
    cases = [{"input": "1 2 3\n", "output": "6\ndone\n\n"}, {"input": "5", "output": "5\ndone"}]
    assert verifier.verify(fenced(code), io_cases=cases).score == 1.0
    wrong = [{"input": "1 2", "output": "4\ndone"}]
    result = verifier.verify(fenced(code), io_cases=wrong)
    assert result.score == 0.0 and result.details["checks"][0]["reason"] == "wrong output"
    crash = verifier.verify(fenced("raise SystemExit(3)"), io_cases=cases)
    assert crash.score == 0.0 and "exit status" in crash.details["checks"][0]["reason"]


def test_io_partial_and_mixed():
    v = CodeVerifier(limits=small_limits(), partial_credit=True)
    code = "import sys\ndef f(x):\n    return 2 * x\n"
    code += "data = sys.stdin.read().split()\nif data:\n    print(f(int(data[0])))\n"
    cases = [{"input": "2", "output": "4"}, {"input": "3", "output": "7"}]
    result = v.verify(fenced(code), tests=TESTS, io_cases=cases)
    assert result.score == pytest.approx(4 / 5)


def test_extraction():
    text = "```python\nx = 1\n```\nthen\n```\nplain = 2\n```\nfinally\n```python\nfinal = 3\n```\nbye"
    assert extract_code(text) == "final = 3"
    assert extract_code("```\nonly_plain = 1\n```") == "only_plain = 1"
    assert extract_code("```text\nnot code\n```\n```\nplain = 1\n```") == "plain = 1"
    assert extract_code("def f():\n    return 1\n") == "def f():\n    return 1"
    assert extract_code("intro\n```python\nunterminated = 1\n") == "unterminated = 1"
    assert normalize_output("a  \r\nb\t\n\n") == "a\nb"


def test_parse_failure_and_syntax_error(verifier):
    empty = verifier.verify("```python\n\n```", tests=TESTS)
    assert (empty.score, empty.status, empty.anomaly) == (0.0, "fail", "parse_failure")
    broken = verifier.verify(fenced("def f(:\n"), tests=TESTS)
    assert broken.score == 0.0 and broken.details["compiles"] is False and broken.anomaly is None


def test_trl_call_and_batch(verifier):
    completions = [[{"role": "assistant", "content": fenced(DOUBLE)}], fenced("def f(x):\n    return 0\n")] * 2
    output = verifier.score_batch(prompts=["p"] * 4, completions=completions, tests=[TESTS] * 4)
    assert output.scores == (1.0, 0.0, 1.0, 0.0)  # what verifier(...) returns to TRL, as a list
    assert [r.status for r in output.results] == ["pass", "fail", "pass", "fail"]


def test_missing_bwrap_raises(monkeypatch):
    monkeypatch.setattr(sandbox_module.shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="apt-get install bubblewrap"):
        CodeVerifier()


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_unsandboxed_mode_when_allowed(monkeypatch):
    monkeypatch.setattr(sandbox_module.shutil, "which", lambda name: None)
    v = CodeVerifier(limits=small_limits(), allow_unsandboxed=True)
    assert v.sandbox.sandboxed is False
    assert v.verify(fenced(DOUBLE), tests=TESTS).score == 1.0
    assert v.verify(fenced("import os\nos._exit(0)"), tests=TESTS).score == 0.0


def test_sandbox_failure_is_unscorable(verifier, monkeypatch):
    v = CodeVerifier(limits=small_limits())
    monkeypatch.setattr(v.sandbox, "bwrap", "/nonexistent/bwrap")
    result = v.verify(fenced(DOUBLE), tests=TESTS)
    assert (result.score, result.status, result.anomaly) == (None, "unscorable", "sandbox_failure")


def test_runner_refuses_without_its_seccomp_filter(monkeypatch):
    v = CodeVerifier(limits=small_limits())
    if v.sandbox.seccomp_filter is None:
        pytest.skip("no seccomp filter on this architecture")
    monkeypatch.setattr(v.sandbox, "_seccomp_fd", lambda: None)  # bwrap started without --seccomp
    result = v.verify(fenced(DOUBLE), tests=TESTS)
    assert (result.score, result.anomaly) == (None, "sandbox_failure")
    assert "seccomp-filter-not-active" in result.details["sandbox_error"]


def test_hack_score():
    v = CodeVerifier(limits=small_limits())
    assert v.hack_score(fenced(DOUBLE), tests=TESTS) == 0.0
    assert v.hack_score(fenced("import builtins\nbuiltins.AssertionError = Exception\n" + DOUBLE)) >= 0.5
    assert v.hack_score(fenced(DOUBLE + "import sys\nsys.exit(0)\n")) >= 0.5
    assert v.hack_score(fenced("class A:\n    def __eq__(self, o):\n        return True\n")) >= 0.5
    assert v.hack_score(fenced("print(open('/sandbox/tests.py').read())")) >= 0.5
    cases = [{"input": "3", "output": "1 2 3\n4 5 6"}]
    assert v.hack_score(fenced("print('1 2 3\\n4 5 6')"), io_cases=cases) >= 0.5
    assert v.hack_score(fenced("print(' '.join(map(str, range(1, 4))))"), io_cases=cases) == 0.0


# -- the hostile suite ---------------------------------------------------------------------------------------


def _processes_with(marker: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(pid))
    return found


def _runner_processes() -> list[int]:
    return [pid for pid in _processes_with("def _main():") if pid != os.getpid()]


def hostile(verifier: CodeVerifier, code: str, tests: list[str] | None = None, io_cases=None, marker: str = ""):
    """Run a hostile program; check the host afterwards (alive, no leftovers, nothing written outside)."""
    columns = {"tests": tests or ["assert f() == 'escaped'"]}
    if io_cases:
        columns = {"io_cases": io_cases}
    result = verifier.safe_verify(fenced(code), **columns)
    deadline = time.monotonic() + 3
    while (_processes_with(marker) or _runner_processes()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _processes_with(marker) == [], "a process of the hostile program outlived the run"
    assert _runner_processes() == [], "a sandboxed runner outlived the run"
    for where in (HOME, REPO, Path("/tmp")):
        assert not list(where.glob(f"*{marker}*")), f"the program wrote into {where}"
    assert subprocess.run([sys.executable, "-c", "print('ok')"], capture_output=True, timeout=30).stdout == b"ok\n"
    assert result.score in (0.0, None), result
    return result


@pytest.fixture
def marker() -> str:
    return f"loogspo{uuid.uuid4().hex[:12]}"


@pytest.mark.slow
def test_infinite_loop(verifier, marker):
    result = hostile(verifier, "while True:\n    pass\n", marker=marker)
    assert result.anomaly == "timeout" and result.details["tests_run"]["limit_hit"] in ("wall_timeout", "cpu")


@pytest.mark.slow
def test_sleep_past_timeout(verifier, marker):
    start = time.monotonic()
    result = hostile(verifier, "import time\ntime.sleep(60)\n", marker=marker)
    assert result.anomaly == "timeout" and result.details["tests_run"]["limit_hit"] == "wall_timeout"
    assert time.monotonic() - start < 10


@pytest.mark.slow
def test_fork_bomb(verifier, marker):
    code = f"""
import os, sys
n = 0
while True:
    try:
        if os.fork() == 0:
            os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)", "{marker}"])
        n += 1
    except OSError:
        break
def f():
    return 'escaped' if n >= 16 else 'contained'
"""
    result = hostile(verifier, code, marker=marker)
    assert result.details["tests_run"]["program_error"] is None
    assert result.details["checks"][0]["reason"] == "AssertionError"  # the process cap held: fork failed below 16


@pytest.mark.slow
def test_fork_bomb_unbounded(verifier, marker):
    code = f"import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n#{marker}\n"
    result = hostile(verifier, code, marker=marker)
    assert result.score == 0.0


@pytest.mark.slow
def test_memory_bomb(verifier, marker):
    code = "blocks = []\nwhile True:\n    blocks.append(bytearray(50 << 20))\n"
    result = hostile(verifier, code, marker=marker)
    assert result.details["tests_run"]["program_error"] == "MemoryError"


@pytest.mark.slow
def test_gigabyte_of_stdout(verifier, marker):
    code = "import sys\nchunk = 'x' * (1 << 20)\nfor _ in range(1024):\n    sys.stdout.write(chunk)\n"
    result = hostile(verifier, code, marker=marker)
    assert result.details["tests_run"]["limit_hit"] == "output"
    assert len(result.details["tests_run"]["stdout_excerpt"]) < 10_000
    io = hostile(verifier, code, io_cases=[{"input": "", "output": "x"}], marker=marker)
    assert io.details["checks"][0]["reason"] == "output"


@pytest.mark.slow
def test_writes_outside_the_sandbox(verifier, marker):
    targets = [HOME / f"{marker}.txt", REPO / f"{marker}.txt", Path("/tmp") / f"{marker}.txt"]
    code = f"""
import os
wrote = []
for path in {[str(t) for t in targets]!r}:
    try:
        with open(path, "w") as fh:
            fh.write("pwned")
        wrote.append(path)
    except OSError:
        pass
def f():
    return 'escaped' if len(wrote) == 3 and os.path.exists({str(REPO / "pyproject.toml")!r}) else 'contained'
"""
    hostile(verifier, code, marker=marker)
    assert not any(t.exists() for t in targets)


@pytest.mark.slow
def test_network_is_unreachable(verifier, marker):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    listener.settimeout(0.1)
    code = f"""
import socket
def attempt(addr):
    try:
        s = socket.create_connection(addr, timeout=1)
        s.close()
        return True
    except OSError:
        return False
reached = [attempt(("127.0.0.1", {port})), attempt(("1.1.1.1", 53))]
def f():
    return 'escaped' if any(reached) else 'contained'
"""
    try:
        result = hostile(verifier, code, marker=marker)
        with pytest.raises(socket.timeout):
            listener.accept()
    finally:
        listener.close()
    assert result.details["checks"][0]["reason"] == "AssertionError"


@pytest.mark.slow
def test_environment_secret_is_invisible(verifier, marker, monkeypatch):
    secret = f"s3cret-{marker}"
    monkeypatch.setenv("LOO_GSPO_SECRET", secret)
    code = """
import os
def f():
    seen = os.environ.get("LOO_GSPO_SECRET", "")
    for pid in os.listdir("/proc"):
        try:
            seen += open(f"/proc/{pid}/environ").read()
        except OSError:
            pass
    return 'escaped' if "s3cret" in seen else 'contained'
"""
    result = hostile(verifier, code, marker=marker)
    assert result.details["checks"][0]["reason"] == "AssertionError"
    assert secret not in str(result.details)


@pytest.mark.slow
def test_killing_the_parent(verifier, marker):
    code = "import os, signal\nfor pid in (os.getppid(), 1):\n    try:\n        os.kill(pid, signal.SIGKILL)\n"
    code += "    except OSError:\n        pass\n"
    hostile(verifier, code, marker=marker)
    assert verifier.verify(fenced(DOUBLE), tests=TESTS).score == 1.0  # the verifier (and this process) live on


@pytest.mark.slow
@pytest.mark.parametrize("exit_call", ["sys.exit(0)", "os._exit(0)", "raise SystemExit", "os.kill(os.getpid(), 9)"])
def test_exit_before_the_tests(verifier, marker, exit_call):
    code = f"import os, sys\ndef f(x):\n    return 0\nprint('{marker} TEST 0 PASS -')\n{exit_call}\n"
    result = hostile(verifier, code, tests=TESTS, marker=marker)
    assert result.status == "fail" and result.details["passed"] == 0


@pytest.mark.slow
def test_monkeypatching_the_harness(verifier, marker):
    code = """
import builtins, os, sys
class Never(Exception):
    pass
builtins.AssertionError = Never
_real_import = builtins.__import__
builtins.__import__ = lambda *a, **k: _real_import(*a, **k)
builtins.exec = lambda *a, **k: None
builtins.compile = lambda *a, **k: None
builtins.print = lambda *a, **k: None
sys.exit = os._exit = lambda *a: None
sys.excepthook = lambda *a: None
import __main__
__main__.__dict__["emit"] = lambda *a: None
for fd in range(3, 40):  # forge result lines on every fd we can guess
    for line in (b"READY\\n", b"x TEST 0 PASS -\\nx TEST 1 PASS -\\nx TEST 2 PASS -\\nx DONE 3\\n"):
        try:
            os.write(fd, line)
        except OSError:
            pass
def f(x):
    return 1
"""
    result = hostile(verifier, code, tests=TESTS, marker=marker)
    assert result.details["passed"] == 0


@pytest.mark.slow
def test_always_equal_is_flagged(verifier):
    code = "class Any:\n    def __eq__(self, other):\n        return True\ndef f(x):\n    return Any()\n"
    # the judge compares plain data it rebuilt, so the forged equality earns nothing; the detector logs the attempt
    assert verifier.verify(fenced(code), tests=TESTS).score == 0.0
    assert verifier.hack_score(fenced(code), tests=TESTS) >= 0.5


@pytest.mark.slow
def test_recursion_bomb(verifier, marker):
    code = "import sys\nsys.setrecursionlimit(10**7)\ndef r(n):\n    return r(n + 1) + 1\nr(0)\n"
    hostile(verifier, code, marker=marker)


@pytest.mark.slow
def test_filling_tmp(verifier, marker):
    code = f"""
import os
written = 0
for directory in ("/tmp", "/sandbox", "."):
    for i in range(100):
        try:
            with open(os.path.join(directory, "{marker}_%d" % i), "wb") as fh:
                fh.write(b"x" * (4 << 20))
            written += 4
        except OSError:
            break
def f():
    return 'escaped' if written > 64 else 'contained'
"""
    hostile(verifier, code, marker=marker)


@pytest.mark.slow
def test_daemon_is_killed(verifier, marker):
    code = f"""
import os, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)", "{marker}"])
    os._exit(0)
os.wait()
def f():
    return 'daemonized'
"""
    result = hostile(verifier, code, marker=marker)
    assert result.details["tests_run"]["completed"] is True


@pytest.mark.slow
def test_daemon_is_killed_io_mode(verifier, marker):
    code = f"""
import os, sys
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(60)", "{marker}"])
    os._exit(0)
os.wait()
print("nope")
"""
    hostile(verifier, code, io_cases=[{"input": "", "output": "yes"}], marker=marker)


LONG_INPUTS = {
    "backticks": "`" * 1_000_000,
    "fence lines": "```\n" * 250_000,
    "fences without newline": "```" * 333_333,
    "headers": "```python " * 100_000,
    "blanks after a fence": "```" + " " * 1_000_000,
}


@pytest.mark.parametrize("name", sorted(LONG_INPUTS))
def test_fence_extraction_is_linear(name):
    text = LONG_INPUTS[name]
    """1 MB of backticks took minutes with the old fence regex (quadratic backtracking); now well under a second."""
    start = time.process_time()  # CPU time: other jobs on the machine do not count
    code_bounds(text)
    CodeVerifier.hack_score(CodeVerifier.__new__(CodeVerifier), text[:150_000])  # under the size cap: analysed
    assert time.process_time() - start < 5.0


def test_unterminated_fence_scan_matches_the_regex():
    reference = re.compile(r"```[ \t]*(python3?|py)?[ \t]*\n(.*)\Z", re.DOTALL)  # the old, quadratic search
    rng = random.Random(0)
    alphabet = ["`", "```", " ", "\t", "\n", "py", "python", "3", "x", "python3"]
    for _ in range(20_000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 12)))
        match = reference.search(text)
        assert _unterminated_python(text) == (match.start(2) if match else None), repr(text)


def test_oversize_completion(verifier):
    big = fenced("x = 1\n" + "#" * verifier.max_completion_chars)
    result = verifier.safe_verify(big, tests=TESTS)
    assert (result.score, result.status, result.anomaly) == (0.0, "fail", "oversize")
    assert verifier.hack_score(big, tests=TESTS) == 1.0  # padding past the cap never dodges P_hack


def test_two_verifiers_in_one_process_have_disjoint_uids():
    first, second = CodeVerifier(limits=small_limits()), CodeVerifier(limits=small_limits())
    assert set(first.sandbox.uids).isdisjoint(second.sandbox.uids)
    assert first.verify(fenced(DOUBLE), tests=TESTS).score == second.verify(fenced(DOUBLE), tests=TESTS).score == 1.0


@pytest.mark.slow
def test_one_test_out_of_cpu_is_a_timeout():
    v = CodeVerifier(limits=small_limits(cpu_time_s=1, wall_timeout_s=20))
    code = "def f(x):\n    if x == 0:\n        while True:\n            pass\n    return 2 * x\n"
    result = v.verify(fenced(code), tests=TESTS)  # f(0) spins in its own child, killed at 1 s of CPU
    assert result.score == 0.0 and result.anomaly == "timeout"
    assert [c["reason"] for c in result.details["checks"]] == ["passed", "cpu", "passed"]
