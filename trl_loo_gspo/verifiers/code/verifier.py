"""Sandboxed code execution verifier (method §2.1: code runs unit tests in a sandbox).

Columns:

* ``tests``: a list of Python statements, usually ``assert``s, run one by one after the program;
* ``io_cases``: a list of ``{"input": str, "output": str}``: the program runs once per case with ``input`` on stdin
  and its stdout must equal ``output`` after stripping trailing whitespace on every line and at the end.

The program is the **last** fenced ``python`` block of the completion (plain fences if there is no ``python``
one), or the whole completion if it has no fence. Execution only ever happens in :mod:`trl_loo_gspo.sandbox`.

Scoring and anomalies (method §5.2)
---------------------------------
* every check passes → ``1.0`` (``"pass"``); otherwise ``0.0`` (``"fail"``), or the fraction passed with
  ``partial_credit=True`` (``"partial"``);
* no code could be extracted (empty completion or fence) → ``0.0``, ``"fail"``, anomaly ``"parse_failure"``: the
  model's fault, so it is scored, and the anomaly is counted so that a broken prompt format shows up in the logs;
* the code does not compile → ``0.0``, ``"fail"``, ``details["compiles"] = False``, nothing is run;
* the program ran out of wall time or CPU → ``0.0``, ``"fail"``, anomaly ``"timeout"`` (a slow program is a
  fail, not unscorable);
* the sandbox could not start, refused to drop privileges, or did not reach the point where it runs the program
  within the wall timeout (the harness itself timed out: overloaded host) → ``None``, ``"unscorable"``, anomaly
  ``"sandbox_failure"`` (or ``"timeout"`` for the latter): never a silent 0.

How a test is decided: the judge never shares a process with the program
---------------------------------------------------------------------------
Each test runs in two fresh processes forked from the trusted runner (:mod:`~trl_loo_gspo.sandbox.runner`): a
*candidate* that runs the program and answers calls, and a *judge* that runs the test's own code — asserts, loops,
the dataset's helpers, the real builtins — and calls the program's functions in the candidate by name, with arguments
and results crossing as plain data (:mod:`~trl_loo_gspo.sandbox.wire`: exact builtin types; anything else fails the
call). The judge never loads the program, the program cannot write to the judge or the result channel, and the test's
constants stay in the judge (the program gets copies as inputs), so ``unittest.mock.ANY``, lying ``__eq__``, builtin
subclasses, patched or shadowed builtins, forged reports and overwritten test constants have nothing to act on. Which
of a test's names are the program's is read from the dataset (the row's ``entry_points`` and ``reference`` columns,
else inferred from the test; :mod:`.test_plan`): a test reading a name the dataset does not define, or a row whose
declaration cannot be read (``details["declaration_error"]``), makes the row unscorable (anomaly
``"undefined_name"``), and a test that passes without any call into the program fails. The program's source
decides a name in one case only: on an undeclared row, a test that reads no name of the program takes the one builtin
the program defines at its top level (``def pow``) as the program's; a judge's "weak" verdict on such a test is a fail
(the program chose the name, so it must not turn its answer into ``None``). The reference's other names (an oracle,
a checker) run in the judge (:mod:`.test_plan`). The judge's report is read by :mod:`.verdicts`.

A test that must hand the program something that is not plain data (a function or class of the test, a lambda, an
open file) cannot be judged this way: it is *weakly verified* (``details["weak_tests"]``, anomaly ``"weak_test"``),
and ``weak_tests`` decides what the answer earns: ``"unscorable"`` (default: ``None`` for every answer of the row,
which then carries no signal and cannot be learned) or ``"skip"`` (the row is judged by its other checks; ``None``
when none is left). :meth:`CodeVerifier.weak_tests_of` finds them statically for a dataset report. io_cases are
decided on the host (stdout is plain data).

Span signals (``emit_spans=True``, method §6)
-------------------------------------------
Spans are character offsets into the completion text that :meth:`CodeVerifier.verify` receives. They reuse the
scoring run (no extra sandbox run) and never change the score.

* ``code_block`` (key ``"code_block"``): the extracted code (:func:`code_bounds`). Value 1.0 if it compiles, else
  0.0. ``meta``: ``tests_passed``/``tests_total`` and, with ``io_cases``, ``io_passed``/``io_total``/
  ``io_fraction``/``io_skipped`` (io cases skipped after a failure in all-or-nothing mode count as not passed).
* ``function`` (key ``"function:<name>"``, or ``"function:<Class>.<name>"`` for a method of a top-level class):
  the function's source, with its decorators and a comment ending its last line; only the last top-level
  definition of a name counts (the one the tests call); nested functions belong to their enclosing function.
  A test *targets* a top-level function when its source reads the function's name (an ``ast.Name`` the test does
  not bind at its own top level, so HumanEval's ``def check(candidate): ...`` + ``check(entry_point)`` targets the
  entry point); it targets a method when it reads the class's name and uses the method's name as an attribute
  (``Solution().two_sum(...)``). Value = the fraction of the targeted tests that passed, where a test passed iff
  its judge reported a pass (its check's ``reason == "passed"``), whether or not the ``DONE`` record came: the
  partial-credit notion, also in all-or-nothing mode (where ``checks[i]["passed"]`` also needs ``DONE``); tests not
  run (crash, timeout) count as failed.
  A function no test targets gets **no** span (no signal is not a zero signal); ``io_cases`` target no function.
  When the code does not compile there is no AST: the ``code_block`` span (0.0) and no function span. When the
  run was unscorable: the ``code_block`` span only. No code at all: ``spans == []``.
* The text outside the code block (prose, other fences) gets no span: the absence of a span is what tells the
  code block from the surrounding text.

Attempt detectors on spans: a flagged span has value 0.0. The ``code_block`` span carries the :meth:`hack_score`
signals of the whole program (``harness``, ``frame_access``, ``mock_any``, ``early_exit``, ``always_equal``,
``file_access``, ``hardcoded_output``; docstrings are ignored here). A ``function`` span carries the signals found in
its own source (with ``early_exit`` also for exit calls inside it), the signals of the module-level code outside
functions and classes (it runs before every test), ``harness``, ``frame_access``, ``mock_any`` and ``always_equal``
found anywhere, and ``hardcoded`` when every ``name(<literals>) == <literal>`` assertion among its passed tests is
answered by special-casing that input (an ``if``/conditional expression comparing to the literal argument(s) that
returns the literal expected value, or a dict literal mapping them to it). The last can misfire on
a correct function whose passed tests are all base cases it handles explicitly (e.g. ``fib(0)``, ``fib(1)`` only).
"""

from __future__ import annotations

import ast
import builtins
import os
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ...sandbox.bubblewrap import Sandbox, SandboxLimits, SandboxRun
from ..base import Verifier, VerifierResult
from ..text import iter_fences
from .hacks import encoding_cookie, normalize_output, program_signals
from .spans import code_spans
from .test_plan import ProgramNames, plan_for, program_names
from .verdicts import channel_records, read_verdict

_EXCERPT = 2000
_BUILTIN_NAMES = frozenset(dir(builtins))
#: What an answer earns when a test of its row cannot be judged across the process boundary (module docstring).
WEAK_TEST_POLICIES = ("unscorable", "skip")


def extract_code(completion: str) -> str:
    """The last ```python fenced block; else the last plain ``` block; else the whole completion (stripped).

    Blocks in other languages (e.g. ```text) are ignored when choosing a fence; an unterminated last fence takes
    the rest of the text.
    """
    start, end = code_bounds(completion)
    return completion[start:end]


def code_bounds(completion: str) -> tuple[int, int]:
    """Where :func:`extract_code`'s code lies in ``completion``: ``completion[start:end] == extract_code(completion)``.

    ``(0, 0)`` when there is no Python to take (only other-language fences).
    """
    python = plain = None
    any_block = False
    for fence in iter_fences(completion):  # linear time (verifiers/text.py); only the last of each kind matters
        any_block = True
        lang = fence.lang.lower()
        if lang in ("python", "py", "python3"):
            python = fence
        elif not lang:
            plain = fence
    if python is not None or plain is not None:
        chosen = python if python is not None else plain
        return _strip_newlines(completion, chosen.start, chosen.end)
    if any_block:  # only other-language fences: nothing that looks like Python
        return 0, 0
    tail = _unterminated_python(completion)
    if tail is not None:
        return _strip_newlines(completion, tail, len(completion))
    return _strip_newlines(completion, 0, len(completion))


#: An unterminated Python fence's header. The blanks are matched atomically (a lookahead capture, then the same text
#: as a backreference: Python < 3.11 has no possessive quantifiers) — the plain ``[ \t]*`` version backtracked
#: quadratically on a long run of blanks; fewer blanks can never help here, so the matches are the same.
_TAIL_FENCE = re.compile(r"```(?=([ \t]*))\1(?:python3?|py)?(?=([ \t]*))\2\n")


def _unterminated_python(text: str) -> int | None:
    """Where the first ```` ``` ````, ```` ```py ````, ```` ```python ```` or ```` ```python3 ```` fence line ends
    (blanks allowed around the tag): the content start of an unterminated fence, else ``None`` (linear time)."""
    match = _TAIL_FENCE.search(text)
    return match.end() if match else None


def _strip_newlines(text: str, start: int, end: int) -> tuple[int, int]:
    """The bounds of ``text[start:end].strip("\\n")``."""
    while start < end and text[start] == "\n":
        start += 1
    while end > start and text[end - 1] == "\n":
        end -= 1
    return start, end


def _program_builtins(code: str) -> tuple[str, ...]:
    """The builtin names ``code`` binds in its top-level statements (``def pow``, ``class list``, ``abs = ...``,
    ``from math import pow``), sorted; ``()`` when it does not parse. Read only for an undeclared row's test that reads
    no other name of the program (:mod:`.test_plan`)."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return ()
    bound: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                bound.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
    return tuple(sorted(n for n in bound & _BUILTIN_NAMES if not n.startswith("_")))


def _excerpt(data: bytes) -> str:
    text = data.decode("utf-8", "replace")
    return text if len(text) <= _EXCERPT else text[:_EXCERPT] + f"... [{len(text) - _EXCERPT} more chars]"


class CodeVerifier(Verifier):
    """Runs the completion's program against ``tests`` (asserts) and/or ``io_cases`` in a bubblewrap sandbox.

    Args:
        partial_credit: score the fraction of checks passed instead of all-or-nothing.
        limits: sandbox resource limits (:class:`~trl_loo_gspo.sandbox.SandboxLimits`);
            or pass ``timeout_s`` etc. directly.
        timeout_s: wall-clock limit per run (one run for all asserts, one per io case).
        max_workers: parallel sandboxes in :meth:`verify_batch` (default ``2 × os.cpu_count()``: most of a
            sandbox's start-up cost — creating and tearing down its PID and network namespaces — is waiting, not
            CPU, so a pool larger than the core count hides it; measured in ``benchmarks/verifier_throughput.py``).
        allow_unsandboxed: run without bwrap (rlimits + timeout only, loud warning) when it is missing; otherwise a
            missing bwrap raises ``RuntimeError``.
        use_bwrap: ``False`` forces the unsandboxed mode (benchmarks only).
        emit_spans: also fill ``VerifierResult.spans`` with the process signals described in the module docstring
            ("Span signals"); they come from the same sandbox run and never change the score.
        weak_tests: what an answer earns when a test of its row is weakly verified (it must hand the program
            something that is not plain data): ``"unscorable"`` (default; ``None``, anomaly ``"weak_test"``) or
            ``"skip"`` (judged by the row's other checks).
        packages: site packages (import names) the program may import, mounted read-only in the sandbox; ``None``
            (default): numpy if installed; ``()``: none; a listed name that is not installed raises ``ValueError``
            (:mod:`trl_loo_gspo.sandbox.packages`).
    """

    name = "code"
    gold_column = "tests"
    version = "2.2"

    def __init__(
        self,
        *,
        partial_credit: bool = False,
        limits: SandboxLimits | None = None,
        timeout_s: float | None = None,
        max_workers: int | None = None,
        allow_unsandboxed: bool = False,
        use_bwrap: bool = True,
        emit_spans: bool = False,
        weak_tests: str = "unscorable",
        packages: Sequence[str] | None = None,
    ) -> None:
        super().__init__()
        if weak_tests not in WEAK_TEST_POLICIES:
            raise ValueError(f"weak_tests must be one of {WEAK_TEST_POLICIES}, got {weak_tests!r}")
        self.weak_tests = weak_tests
        self.emit_spans = emit_spans
        limits = limits or SandboxLimits()
        if timeout_s is not None:
            limits.wall_timeout_s = timeout_s
            limits.cpu_time_s = max(1, min(limits.cpu_time_s, int(timeout_s + 0.999)))
        self.partial_credit = partial_credit
        self.max_workers = max_workers or 2 * (os.cpu_count() or 1)
        self.sandbox = Sandbox(
            limits,
            allow_unsandboxed=allow_unsandboxed,
            use_bwrap=use_bwrap,
            slots=max(self.max_workers, 1),
            packages=packages,
        )
        self._pool: ThreadPoolExecutor | None = None

    # -- contract --------------------------------------------------------------------------------------------

    def verify_batch(self, completions: list[str], columns: list[dict[str, Any]]) -> list[VerifierResult]:
        """Score a batch on a bounded thread pool (each worker drives one sandbox process)."""
        if len(completions) != len(columns):
            raise ValueError("completions and columns differ in length")
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.max_workers, thread_name_prefix="code-verifier")
        return list(
            self._pool.map(lambda args: self.safe_verify(args[0], **args[1]), zip(completions, columns, strict=True))
        )

    def verify(self, completion: str, **columns: Any) -> VerifierResult:
        """Score one completion against ``tests`` and/or ``io_cases`` (and fill ``spans`` when ``emit_spans``)."""
        tests = [str(t) for t in columns.get("tests") or []]
        io_cases = list(columns.get("io_cases") or [])
        if not tests and not io_cases:
            raise ValueError("CodeVerifier needs a non-empty 'tests' or 'io_cases' column")
        start, end = code_bounds(completion)
        result = self._verify_code(completion[start:end], tests, io_cases, program_names(columns))
        if self.emit_spans:
            try:
                result.spans = code_spans(completion[start:end], start, result.details, tests, io_cases)
            except Exception as err:  # spans are extra: a bug in them must never change the score
                result.details["spans_error"] = f"{type(err).__name__}: {err}"
        return result

    def _verify_code(
        self, code: str, tests: list[str], io_cases: list[dict[str, Any]], names: ProgramNames | None = None
    ) -> VerifierResult:
        details: dict[str, Any] = {"code_chars": len(code), "sandboxed": self.sandbox.sandboxed}
        if not code.strip():
            details["compiles"] = False
            return VerifierResult(0.0, "fail", "parse_failure", {**details, "error": "no code in the completion"})
        cookie = encoding_cookie(code)
        if cookie is not None:  # the interpreter would decode the file differently from what the host analysed
            details.update(compiles=False, rule="encoding_cookie", error=f"non-UTF-8 coding declaration {cookie!r}")
            return VerifierResult(0.0, "fail", None, details)
        try:
            compile(code, "main.py", "exec")
            details["compiles"] = True
        except (SyntaxError, ValueError, MemoryError, RecursionError, OverflowError) as err:
            # the program's own fault (e.g. an expression too deep or too large to compile): a fail, never None
            details.update(compiles=False, error=f"{type(err).__name__}: {str(err)[:500]}")
            return VerifierResult(0.0, "fail", None, details)

        checks: list[dict[str, Any]] = []
        anomaly: str | None = None
        if tests:
            outcome = self._run_tests(code, tests, names or ProgramNames())
            if isinstance(outcome, VerifierResult):
                outcome.details = {**details, **outcome.details}
                return outcome
            test_checks, run_info = outcome
            checks += test_checks
            details["tests_run"] = run_info
            if run_info.get("limit_hit") in ("wall_timeout", "cpu") or any(c["reason"] == "cpu" for c in test_checks):
                anomaly = "timeout"  # the whole run, or one test's child, ran out of time
        if io_cases:
            details["io_runs"] = []
            for i, case in enumerate(io_cases):
                if not self.partial_credit and any(not c["passed"] for c in checks):
                    checks.append({"kind": "io", "index": i, "passed": False, "reason": "skipped"})
                    continue
                outcome = self._run_io(code, case, i)
                if isinstance(outcome, VerifierResult):
                    outcome.details = {**details, **outcome.details}
                    return outcome
                check, run_info = outcome
                checks.append(check)
                details["io_runs"].append(run_info)
                if run_info.get("limit_hit") in ("wall_timeout", "cpu"):
                    anomaly = "timeout"
        details["checks"] = checks
        passed = sum(c["passed"] for c in checks)
        details["passed"], details["total"] = passed, len(checks)
        if passed == len(checks):
            return VerifierResult(1.0, "pass", anomaly, details)
        if self.partial_credit:
            return VerifierResult(passed / len(checks), "partial" if passed else "fail", anomaly, details)
        return VerifierResult(0.0, "fail", anomaly, details)

    # -- runs ------------------------------------------------------------------------------------------------

    def _run(self, config: dict[str, Any]) -> tuple[SandboxRun, list[list[str]], dict[str, Any]] | VerifierResult:
        nonce = os.urandom(16).hex()
        run = self.sandbox.run({**config, "nonce": nonce})
        info: dict[str, Any] = {
            "exit_status": run.returncode,
            "limit_hit": run.limit_hit,
            "wall_s": round(run.wall_s, 3),
            "stdout_excerpt": _excerpt(run.stdout),
            "stderr_excerpt": _excerpt(run.stderr),
        }
        if run.error is not None:
            return VerifierResult(None, "unscorable", "sandbox_failure", {"sandbox_error": run.error, **info})
        records = channel_records(run.channel, nonce)
        if not any(r and r[0] == "READY" for r in records):
            if run.timed_out:  # the harness never got to run the program in time: not the model's fault
                return VerifierResult(
                    None, "unscorable", "timeout", {"error": "sandbox did not start in time", **info}
                )
            errors = [" ".join(r) for r in records if r and r[0] == "ERROR"]
            why = errors[0] if errors else (run.stderr.decode("utf-8", "replace").strip()[-500:] or "no READY record")
            return VerifierResult(None, "unscorable", "sandbox_failure", {"sandbox_error": why, **info})
        return run, records, info

    def _run_tests(
        self, code: str, tests: list[str], names: ProgramNames
    ) -> tuple[list[dict[str, Any]], dict[str, Any]] | VerifierResult:
        if names.error is not None:  # the row's declaration cannot be read: never judged by inference instead
            details = {"declaration_error": names.error}
            return VerifierResult(None, "unscorable", "undefined_name", details)
        defined = _program_builtins(code) if names.entry_points is None else ()
        plans = [plan_for(t, names, defined) for t in tests]
        undefined = {i: p.undefined for i, p in enumerate(plans) if p.undefined}
        if undefined:  # decided from the row alone: no answer of it can be judged (module docstring)
            details = {"undefined_tests": sorted(undefined), "undefined_reasons": undefined}
            return VerifierResult(None, "unscorable", "undefined_name", details)
        weak = {i: p.weak for i, p in enumerate(plans) if p.weak}
        if weak and self.weak_tests == "unscorable":  # decided from the row alone: the same for every answer
            return self._weak_result(weak, {})
        to_run = [i for i in range(len(plans)) if i not in weak]
        if not to_run:
            return self._weak_result(weak, {})
        config = {"mode": "tests", "program": code, "tests": [plans[i].wire() for i in to_run], "n_tests": len(to_run)}
        outcome = self._run({**config, "entry_bytes": self.sandbox.limits.output_bytes})
        if isinstance(outcome, VerifierResult):
            return outcome
        run, records, info = outcome
        done = any(r[0] == "DONE" and r[1:2] == [str(len(to_run))] for r in records)
        verdicts = {}
        for r in records:
            if r[0] == "ENTRY" and len(r) == 5 and r[1].isdigit() and int(r[1]) < len(to_run):
                verdicts.setdefault(to_run[int(r[1])], read_verdict(r[2], r[3], r[4]))
        checks = []
        program_error = None
        for i in to_run:
            verdict = verdicts.get(i)
            if verdict is not None and verdict.weak and not plans[i].claimed:
                weak[i] = verdict.reason
                continue
            if verdict is None:
                passed, reason = False, "not run"
            else:
                passed, reason = verdict.passed, verdict.reason
                program_error = program_error or verdict.program_error
            # all-or-nothing needs the DONE record; partial credit keeps the tests that passed before a crash
            check = {"kind": "test", "index": i, "passed": passed and (done or self.partial_credit), "reason": reason}
            if verdict is not None:
                check["calls"] = verdict.calls
            checks.append(check)
        if weak and (self.weak_tests == "unscorable" or not checks):  # found by a judge at run time
            return self._weak_result(weak, info)
        info.update(program_error=program_error, completed=done, weak_tests=sorted(weak))
        if program_error is None and not done and not run.limit_hit:
            info["error"] = "the run ended before the tests finished"
        return checks, info

    def _weak_result(self, weak: dict[int, str], info: dict[str, Any]) -> VerifierResult:
        details = {"weak_tests": sorted(weak), "weak_reasons": {i: weak[i] for i in sorted(weak)}, **info}
        return VerifierResult(None, "unscorable", "weak_test", details)

    @staticmethod
    def weak_tests_of(tests: list[str], **columns: Any) -> dict[int, str]:
        """The tests of a row that are weakly verified, found from the row alone (index → why), for a dataset
        report; a judge can still find more at run time (an argument computed by the test that is not plain data,
        before the program answered anything). ``columns``: the row's ``entry_points``/``reference``."""
        names = program_names(columns)
        plans = [plan_for(str(t), names) for t in tests]
        return {i: plan.weak for i, plan in enumerate(plans) if plan.weak}

    def _run_io(
        self, code: str, case: dict[str, Any], index: int
    ) -> tuple[dict[str, Any], dict[str, Any]] | VerifierResult:
        outcome = self._run({"mode": "io", "program": code, "stdin": str(case.get("input", ""))})
        if isinstance(outcome, VerifierResult):
            return outcome
        run, _, info = outcome
        got = normalize_output(run.stdout.decode("utf-8", "replace"))
        want = normalize_output(str(case.get("output", "")))
        if run.limit_hit:
            passed, reason = False, run.limit_hit
        elif run.returncode != 0:
            passed, reason = False, f"exit status {run.returncode}"
        else:
            passed = got == want
            reason = "passed" if passed else "wrong output"
        return {"kind": "io", "index": index, "passed": passed, "reason": reason}, info

    # -- reward-hacking detector -----------------------------------------------------------------------------

    def hack_score(self, completion: str, **columns: Any) -> float:
        """**Attempt detected**: a cheap static detector of reward-hacking attempts for P_hack (method §2.1), in
        [0, 1]; never raises. The judge decides the score (every attempt it flags scores 0.0 there); this measures
        that the policy *tried*, logged as ``shaping/<name>/hack`` and ``.../hack_triggered`` and penalised only
        when ``hack_penalty > 0``.

        Each distinct *kind* of attempt found in the extracted program adds 0.5 (capped at 1): ``always_equal`` (a
        comparison dunder whose answer does not depend on the other operand, or any comparison override on a
        subclass of a builtin value type), ``mock_any`` (``unittest.mock.ANY`` and friends), ``harness`` (patching
        builtins/sys/os/imported modules, tracing and audit hooks, ctypes, ...), ``frame_access`` (frames,
        tracebacks, ``gc``, ``sys.modules``), ``early_exit``, ``file_access``, ``hardcoded_output`` (an expected io
        output as a literal), ``encoding_cookie`` (a coding declaration that changes the text), ``unanalysable``
        (the analysis failed). The signals are listed in :mod:`.hacks`; a clean program scores 0.0. Completions
        longer than :attr:`max_completion_chars` are not analysed and get 1.0 (their reward is 0, ``oversize``;
        were it 0.0 here, padding an attempt past the cap would hide it from P_hack).
        """
        if self.is_oversize(completion):  # not read; 1.0 so that padding a hack past the cap cannot dodge P_hack
            return 1.0
        code = extract_code(completion)
        if not code.strip():
            return 0.0
        signals = program_signals(code, columns.get("io_cases"))
        return min(1.0, 0.5 * len(signals))
