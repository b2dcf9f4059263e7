"""CodeVerifier throughput: the sandbox with the host-side oracle vs bare subprocesses.

Verifies 512 small programs (half correct, half wrong; asserts and io cases) on (at most) two pinned cores, with
pool sizes 2 and 4 (sandbox start-up is partly latency — namespace setup and teardown — not CPU), three ways:

* **plain**: a bare ``python -I -S -c <program + asserts>`` subprocess per program (stdin piped for io cases, stdout
  compared), the least any harness can do — no sandbox, no oracle, no rlimits;
* **runner**: ``CodeVerifier(use_bwrap=False)``: our runner and oracle (split asserts, a forked child per test,
  rlimits, timeout), no namespaces;
* **sandbox**: ``CodeVerifier()``: the same through ``bwrap`` (namespaces, seccomp, masks).

It prints programs/s for each and the slowdown ratios sandbox/plain (the target, ≤ 1.5×) and sandbox/runner.
Always exits 0.

    python benchmarks/verifier_throughput.py [--n 512] [--cores 2] [--workers 2 4]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

from trl_loo_gspo.sandbox.bubblewrap import SandboxLimits
from trl_loo_gspo.verifiers.code.verifier import CodeVerifier

GOOD = "```python\ndef add(a, b):\n    return a + b\n```"
BAD = "```python\ndef add(a, b):\n    return a - b\n```"
TESTS = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(10, 5) == 15"]
IO_GOOD = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
IO_BAD = "```python\na, b = map(int, input().split())\nprint(a * b)\n```"
IO_CASES = [{"input": "2 3\n", "output": "5\n"}]


def workload(n: int) -> tuple[list[str], list[dict]]:
    """``n`` completions cycling through pass/fail × asserts/io."""
    kinds = [(GOOD, {"tests": TESTS}), (BAD, {"tests": TESTS}), (IO_GOOD, {"io_cases": IO_CASES})]
    kinds.append((IO_BAD, {"io_cases": IO_CASES}))
    rows = [kinds[i % len(kinds)] for i in range(n)]
    return [r[0] for r in rows], [r[1] for r in rows]


def measure(verifier: CodeVerifier, completions: list[str], columns: list[dict]) -> tuple[float, float]:
    """(programs per second, fraction that passed)."""
    verifier.verify_batch(completions[:8], columns[:8])  # warm-up (pool, page cache)
    start = time.perf_counter()
    results = verifier.verify_batch(completions, columns)
    elapsed = time.perf_counter() - start
    bad = [r for r in results if r.score is None]
    if bad:
        print(f"  warning: {len(bad)} unscorable results, e.g. {bad[0].details}", file=sys.stderr)
    return len(completions) / elapsed, sum(r.score == 1.0 for r in results) / len(results)


def plain_one(code: str, column: dict) -> bool:
    """One program in a bare subprocess: asserts appended, or stdin piped and stdout compared."""
    program = code.split("```python\n", 1)[1].rsplit("```", 1)[0]
    argv = [sys.executable, "-I", "-S", "-c"]
    if "tests" in column:
        run = subprocess.run([*argv, program + "\n" + "\n".join(column["tests"])], capture_output=True, timeout=10)
        return run.returncode == 0
    case = column["io_cases"][0]
    run = subprocess.run([*argv, program], input=case["input"].encode(), capture_output=True, timeout=10)
    return run.returncode == 0 and run.stdout.decode().strip() == case["output"].strip()


def measure_plain(workers: int, completions: list[str], columns: list[dict]) -> tuple[float, float]:
    """(programs per second, fraction that passed) for bare subprocesses on a pool of ``workers``."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        list(pool.map(plain_one, completions[:8], columns[:8]))
        start = time.perf_counter()
        passed = list(pool.map(plain_one, completions, columns))
    return len(completions) / (time.perf_counter() - start), sum(passed) / len(passed)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=512)
    parser.add_argument("--cores", type=int, default=2, help="pin the process to this many cores")
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 4], help="pool sizes to measure")
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))[: args.cores]
    os.sched_setaffinity(0, cpus)
    completions, columns = workload(args.n)
    limits = SandboxLimits(wall_timeout_s=10, cpu_time_s=5, memory_bytes=512 << 20)
    print(f"{args.n} programs, cores {cpus}, python {sys.version.split()[0]}")
    if shutil.which("bwrap") is None:
        print("bwrap not installed (apt-get install bubblewrap): sandboxed figure skipped")
        return 0
    for workers in args.workers:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            bare = CodeVerifier(limits=limits, max_workers=workers, use_bwrap=False)
        sandboxed = CodeVerifier(limits=limits, max_workers=workers)
        plain_rate, plain_pass = measure_plain(workers, completions, columns)
        bare_rate, bare_pass = measure(bare, completions, columns)
        sandbox_rate, sandbox_pass = measure(sandboxed, completions, columns)
        ratio = plain_rate / sandbox_rate
        print(f"[{workers} workers] plain subprocess  : {plain_rate:7.1f} programs/s  (pass rate {plain_pass:.2f})")
        print(f"[{workers} workers] runner, no bwrap  : {bare_rate:7.1f} programs/s  (pass rate {bare_pass:.2f})")
        print(
            f"[{workers} workers] bwrap sandbox     : {sandbox_rate:7.1f} programs/s  (pass rate {sandbox_pass:.2f})"
        )
        verdict = "met" if ratio <= 1.5 else "NOT met"
        print(f"[{workers} workers] sandbox / plain   : {ratio:7.2f}x  (target <= 1.5x: {verdict})")
        print(f"[{workers} workers] sandbox / runner  : {bare_rate / sandbox_rate:7.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
