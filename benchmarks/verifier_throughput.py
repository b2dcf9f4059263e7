"""CodeVerifier throughput: the judge/candidate oracle vs the previous oracle vs bare subprocesses.

Verifies ``--n`` small programs (half correct, half wrong; three asserts, a HumanEval-style ``check(candidate)`` with a
loop, or one io case) on (at most) two pinned cores with a pool of ``--workers``, three ways, each in its own
process, in alternating rounds (``--rounds``; medians reported):

* **plain**: a bare ``python -I -S -c <program + tests>`` subprocess per program (stdin piped for io cases, stdout
  compared), the least any harness can do — no sandbox, no oracle, no rlimits;
* **previous**: ``CodeVerifier()`` of ``--baseline-ref`` (default ``d4f5813``, the oracle before the judge: split
  asserts judged on the host, in-sandbox asserts in the program's process), extracted with ``git archive``;
* **judge**: ``CodeVerifier()`` of this checkout (a judge and a candidate process per test, in bwrap).

It prints programs/s per arm and round, the medians and the ratios per completion judge/previous (the target,
≤ 1.5×) and judge/plain. Always exits 0.

    python benchmarks/verifier_throughput.py [--n 256] [--rounds 5] [--workers 4] [--baseline-ref d4f5813]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent

GOOD = "```python\ndef add(a, b):\n    return a + b\n```"
BAD = "```python\ndef add(a, b):\n    return a - b\n```"
TESTS = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(10, 5) == 15"]
LOOP_TEST = [
    "def check(candidate):\n    import random\n    rng = random.Random(0)\n    for _ in range(20):\n"
    "        a, b = rng.randint(-99, 99), rng.randint(-99, 99)\n"
    "        assert candidate(a, b) == a + b\n\ncheck(add)\n"
]
IO_GOOD = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
IO_BAD = "```python\na, b = map(int, input().split())\nprint(a * b)\n```"
IO_CASES = [{"input": "2 3\n", "output": "5\n"}]


def workload(n: int) -> tuple[list[str], list[dict]]:
    """``n`` completions cycling through pass/fail × asserts/io."""
    kinds = [(GOOD, {"tests": TESTS}), (BAD, {"tests": TESTS}), (IO_GOOD, {"io_cases": IO_CASES})]
    kinds += [(IO_BAD, {"io_cases": IO_CASES}), (GOOD, {"tests": LOOP_TEST}), (BAD, {"tests": LOOP_TEST})]
    rows = [kinds[i % len(kinds)] for i in range(n)]
    return [r[0] for r in rows], [r[1] for r in rows]


def measure(verifier: Any, completions: list[str], columns: list[dict]) -> tuple[float, float]:
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


def arm(name: str, n: int, workers: int) -> dict[str, float]:
    """One measurement in this process (``--arm``): the oracle importable here, or bare subprocesses."""
    completions, columns = workload(n)
    if name == "plain":
        rate, passed = measure_plain(workers, completions, columns)
    else:
        from trl_loo_gspo.sandbox.bubblewrap import SandboxLimits
        from trl_loo_gspo.verifiers.code.verifier import CodeVerifier

        limits = SandboxLimits(wall_timeout_s=10, cpu_time_s=5, memory_bytes=512 << 20)
        rate, passed = measure(CodeVerifier(limits=limits, max_workers=workers), completions, columns)
    return {"rate": rate, "pass_rate": passed}


def baseline_tree(ref: str) -> str:
    """The package as of ``ref`` in a temporary directory (``git archive``)."""
    target = tempfile.mkdtemp(prefix="verifier-baseline-")
    archive = subprocess.run(["git", "-C", str(REPO), "archive", ref, "trl_loo_gspo"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", target], input=archive.stdout, check=True)
    return target


def run_arm(name: str, path: str, args: argparse.Namespace) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": path}
    argv = [sys.executable, __file__, "--arm", name, "--n", str(args.n), "--workers", str(args.workers)]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cores", type=int, default=2, help="pin the processes to this many cores")
    parser.add_argument("--workers", type=int, default=4, help="pool size")
    parser.add_argument("--baseline-ref", default="d4f5813", help="git ref of the previous oracle")
    parser.add_argument("--arm", choices=["plain", "oracle"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))[: args.cores]
    os.sched_setaffinity(0, cpus)
    if args.arm:
        print(json.dumps(arm(args.arm, args.n, args.workers)))
        return 0
    if shutil.which("bwrap") is None:
        print("bwrap not installed (apt-get install bubblewrap): nothing measured")
        return 0
    print(f"{args.n} programs per round, pool {args.workers}, cores {cpus}, python {sys.version.split()[0]}")
    baseline = baseline_tree(args.baseline_ref)
    arms = {"plain": ("plain", str(REPO)), "previous": ("oracle", baseline), "judge": ("oracle", str(REPO))}
    rates: dict[str, list[float]] = {name: [] for name in arms}
    try:
        for round_ in range(args.rounds):
            for name, (kind, path) in arms.items():
                result = run_arm(kind, path, args)
                rates[name].append(result["rate"])
                print(
                    f"round {round_ + 1} {name:9s}: {result['rate']:7.1f} programs/s (pass {result['pass_rate']:.2f})"
                )
    finally:
        shutil.rmtree(baseline, ignore_errors=True)
    median = {name: statistics.median(values) for name, values in rates.items()}
    for name, value in median.items():
        print(f"median {name:9s}: {value:7.1f} programs/s = {1000 / value:6.2f} ms per completion")
    ratio = median["previous"] / median["judge"]
    verdict = "met" if ratio <= 1.5 else "NOT met"
    print(f"judge / previous (time per completion): {ratio:.2f}x (target <= 1.5x: {verdict})")
    print(f"judge / plain    (time per completion): {median['plain'] / median['judge']:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
