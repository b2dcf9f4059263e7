"""How one test is run by the judge: which of its names are the program's, and whether it can be judged at all.

The host reads only the **test** (never the program: a test means what its dataset says, whatever the program's
source contains). A name the test reads but never binds is

* a built-in → the real built-in, in the judge;
* a standard-library module (``math`` in ``math.isclose(f(x), 1.0)``, which the test expects the program to have
  imported) → the real module, imported by the judge;
* anything else → a name of the program: a remote reference whose calls run in the candidate process.

A call made as a statement (``f(xs)``, its value unused) is rewritten to ``__loo_statement_call__(f, xs)`` so that
the judge writes the program's changes back into its mutable arguments: the test asks for the side effect. Nowhere
else does a value come back from the program except as what a call returned.

A test is **weakly verified** when it must hand the program something that is not plain data: a function or class
it defines, a lambda, an open file (static check here; the judge also refuses such an argument when it meets one at
run time). Such a test cannot be judged across the process boundary; :class:`~.verifier.CodeVerifier`'s
``weak_tests`` decides what it earns.
"""

from __future__ import annotations

import ast
import builtins
import functools
import sys
from dataclasses import dataclass

STATEMENT_CALL = "__loo_statement_call__"
_BUILTINS = frozenset(dir(builtins))
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) - {"__future__"}


@dataclass(frozen=True)
class TestPlan:
    """One test as the judge runs it.

    Attributes:
        source: the test's source (statement calls rewritten, see the module docstring; otherwise unchanged).
        remote: the program's names the test uses (remote references in the judge), sorted.
        modules: standard-library modules the test uses without importing them, sorted.
        weak: why the test cannot be judged across the boundary, or ``None``.
    """

    source: str
    remote: tuple[str, ...]
    modules: tuple[str, ...]
    weak: str | None = None

    def wire(self) -> tuple[str, list[str], list[str]]:
        """What the runner receives for this test."""
        return self.source, list(self.remote), list(self.modules)


@functools.lru_cache(maxsize=4096)
def plan_test(source: str) -> TestPlan:
    """The plan of one test (cached: the answers of a group share their tests). A test that does not parse is
    sent unchanged: the judge fails it (``test does not compile``), which is the dataset's fault for every answer."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return TestPlan(source, (), ())
    bound, loaded, defined = _names(tree)
    free = loaded - bound - _BUILTINS
    modules = tuple(sorted(n for n in free if n in _STDLIB))
    remote = tuple(sorted(free - set(modules)))
    weak = _static_weakness(tree, set(remote), defined)
    rewriter = _StatementCalls(set(remote) | _parameters(tree))
    tree = rewriter.visit(tree)
    if rewriter.changed:
        source = ast.unparse(ast.fix_missing_locations(tree))
    return TestPlan(source, remote, modules, weak)


def weakly_verified_rows(tests_column: list[list[str] | None]) -> dict[int, str]:
    """The rows of a dataset's ``tests`` column with a weakly verified test (row index → why), for a dataset report."""
    weak: dict[int, str] = {}
    for row, tests in enumerate(tests_column):
        reason = next((plan.weak for t in tests or () if (plan := plan_test(str(t))).weak), None)
        if reason is not None:
            weak[row] = reason
    return weak


def _names(tree: ast.Module) -> tuple[set[str], set[str], set[str]]:
    """(names bound anywhere in the test, names read anywhere, names of functions/classes/lambdas-bound names)."""
    bound: set[str] = set()
    loaded: set[str] = set()
    defined: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
            defined.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            bound.update(node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Lambda):
            defined.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return bound, loaded, defined


def _static_weakness(tree: ast.Module, remote: set[str], defined: set[str]) -> str | None:
    """Why some call of the program in ``tree`` hands it a function, a class or a file (``None`` if none does).

    A call "of the program" is a call of a remote name, of a parameter of a function of the test (HumanEval's
    ``candidate``), or of an attribute of either."""
    params = _parameters(tree)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not _is_program_call(node.func, remote | params):
            continue
        for arg in [*node.args, *(k.value for k in node.keywords)]:
            value = arg.value if isinstance(arg, ast.Starred) else arg
            if isinstance(value, ast.Lambda):
                return f"hands the program a lambda ({ast.unparse(node)[:80]})"
            if isinstance(value, ast.Name) and value.id in defined:
                return f"hands the program {value.id!r}, defined by the test ({ast.unparse(node)[:80]})"
            if isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "open":
                return f"hands the program an open file ({ast.unparse(node)[:80]})"
    return None


def _parameters(tree: ast.Module) -> set[str]:
    return {node.arg for node in ast.walk(tree) if isinstance(node, ast.arg)}


def _is_program_call(func: ast.expr, program: set[str]) -> bool:
    while isinstance(func, (ast.Attribute, ast.Call)):
        func = func.value if isinstance(func, ast.Attribute) else func.func
    return isinstance(func, ast.Name) and func.id in program


class _StatementCalls(ast.NodeTransformer):
    """``f(args)`` as a statement, ``f`` a name of the program or a parameter (HumanEval's ``candidate``), →
    ``__loo_statement_call__(f, args)`` (the judge writes back only when ``f`` is in fact the program's)."""

    def __init__(self, program: set[str]) -> None:
        self.changed = False
        self.program = program

    def visit_Expr(self, node: ast.Expr) -> ast.Expr:  # noqa: N802 - ast.NodeTransformer's naming
        call = node.value
        if isinstance(call, ast.Call) and _is_program_call(call.func, self.program):
            self.changed = True
            node.value = ast.Call(ast.Name(STATEMENT_CALL, ast.Load()), [call.func, *call.args], call.keywords)
        self.generic_visit(node)
        return node
