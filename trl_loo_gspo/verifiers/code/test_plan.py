"""How one test is run by the judge: which of its names are the program's, and whether it can be judged at all.

The host reads only the **dataset** (the test, and the row's ``entry_points`` / ``reference`` columns), never the
program: a test means what its dataset says, whatever the program's source contains. A name the test reads but never
binds is, when the row declares its entry points (``entry_points``, or the top-level functions and classes of its
``reference`` solution):

* an entry point → the program's, always (even ``pow`` or ``calendar``: the entry point shadows a builtin or a
  module of the same name);
* a built-in → the real built-in, in the judge;
* a standard-library module (``math`` in ``math.isclose(f(x), 1.0)``, which the test expects the program to have
  imported) → the real module, imported by the judge;
* anything else (``np``, ``Counter`` without an import, a helper the dataset never ships) → **undefined**: the test
  cannot be judged, the row is unscorable (anomaly ``undefined_name``), and ``prepare_dataset`` counts and names it.

When the row declares nothing, the program's names are inferred from the test alone: every free name that is not a
built-in, except a standard-library module used as one (``math.pi``; a stdlib name that is only *called*, like
``calendar(2024)``, is the program's), a name used only as a module (``np.allclose``) that is no standard-library
module (undefined), and, when the test reads more than one such name, a public name of a common standard-library module
(a capitalised one such as ``Counter`` or ``Fraction``, or ``defaultdict``, ``deque``, ``namedtuple``: the test
forgot its import; undefined; ``add``, ``gcd``, ``mean`` stay the program's). Declaring ``entry_points`` closes what
inference cannot see (a program-defined helper on the expected side).

Objects (values that are not plain data) may come back only from a class of the row's ``reference`` (``classes``),
or from a method of such an object, and such a handle answers only the ``members`` the reference's classes define
(methods, class attributes, ``self.x``: a stub with the signatures is enough); an iterator may always come back
(served lazily).

A call of the program made as a statement (``f(xs)``) is rewritten to ``__loo_statement_call__(f, xs)`` so that the
judge writes the program's changes back into its mutable arguments: the test asks for the side effect. A call inside
an expression that **returned None** — an in-place function, by Python's convention — and has a variable argument that
its statement reads nowhere else (``assert f(xs) is None``, ``r = f(xs)``) gets the same write-back
(``__loo_mutating_call__``), so the next statement sees ``xs`` as the program left it. A call that returned a value
gets none (``res = sort(lst); assert res == sorted(lst)``: the program cannot empty ``lst`` to match its answer),
nor does a statement that reads the variable again (``assert f(xs) == xs``).

A test is **weakly verified** when it must hand the program something that is not plain data: a function or class
it defines, a lambda, an open file (static check here; the judge also refuses such an argument when it meets one at
run time before the program answered anything). Such a test cannot be judged across the process boundary;
:class:`~.verifier.CodeVerifier`'s ``weak_tests`` decides what it earns.
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

STATEMENT_CALL = "__loo_statement_call__"
#: A call inside an expression whose changes are written back only when it returned ``None`` (module docstring).
MUTATING_CALL = "__loo_mutating_call__"
_BUILTINS = frozenset(dir(builtins))
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) - {"__future__"}
#: Modules whose public names a test commonly uses after an import it left out (inference mode only).
_EXPORTING_MODULES = (
    "collections", "itertools", "functools", "math", "cmath", "fractions", "decimal", "heapq", "bisect", "string",
    "operator", "statistics", "re", "copy", "datetime", "random", "typing", "array",
)  # fmt: skip


#: Lower-case standard-library classes a test uses as values after an import it left out; other lower-case exports
#: (``add``, ``gcd``, ``count``, ``mean``) are common names of a program's own functions, so they are not undefined.
_LOWERCASE_CLASS_EXPORTS = frozenset({"defaultdict", "deque", "namedtuple"})


@dataclass(frozen=True)
class TestPlan:
    """One test as the judge runs it.

    Attributes:
        source: the test's source (write-back calls rewritten, see the module docstring; otherwise unchanged).
        remote: the program's names the test uses (remote references in the judge), sorted.
        modules: standard-library modules the test uses without importing them, sorted.
        weak: why the test cannot be judged across the boundary, or ``None``.
        classes: the names in ``remote`` whose calls may return an object (the reference's classes).
        undefined: why the test reads a name the dataset does not define (the row is unscorable), or ``None``.
    """

    source: str
    remote: tuple[str, ...]
    modules: tuple[str, ...]
    weak: str | None = None
    classes: tuple[str, ...] = ()
    undefined: str | None = None
    members: tuple[str, ...] = ()

    def wire(self) -> tuple[str, list[str], list[str], list[str], list[str]]:
        """What the runner receives for this test."""
        return self.source, list(self.remote), list(self.modules), list(self.classes), list(self.members)


@dataclass(frozen=True)
class ProgramNames:
    """Which names of a row are the program's, read from the dataset: ``entry_points`` (``None``: inferred from
    each test), ``classes`` (those whose calls may return objects) and ``members`` (the methods and attributes the
    reference's classes define: all a handle of the program answers)."""

    entry_points: tuple[str, ...] | None = None
    classes: tuple[str, ...] = ()
    members: tuple[str, ...] = ()


def program_names(columns: Mapping[str, Any]) -> ProgramNames:
    """The program's names of one row: its ``entry_points`` column (a name or a list of names) and the top-level
    functions and classes of its ``reference`` column (a reference solution, or a stub with the signatures); the
    reference's classes are the names that may return objects."""
    declared = columns.get("entry_points")
    if isinstance(declared, str):
        declared = [declared]
    names = {str(n) for n in declared or () if str(n).isidentifier()}
    defined, classes, members = _reference_names(str(columns.get("reference") or ""))
    if not names and not defined:
        return ProgramNames()
    return ProgramNames(tuple(sorted(names | defined)), tuple(sorted(classes)), tuple(sorted(members)))


@functools.lru_cache(maxsize=1024)
def _reference_names(reference: str) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """(top-level functions and classes, classes, members of the classes: methods, class attributes, ``self.x``)."""
    empty: frozenset[str] = frozenset()
    if not reference.strip():
        return empty, empty, empty
    try:
        tree = ast.parse(reference)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return empty, empty, empty
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    defined = {node.name for node in tree.body if isinstance(node, kinds)}
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    members: set[str] = set()
    for klass in classes:
        for node in klass.body:
            if isinstance(node, kinds):
                members.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                members.update(t.id for t in targets if isinstance(t, ast.Name))
        for node in ast.walk(klass):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                if isinstance(node.value, ast.Name) and node.value.id == "self":
                    members.add(node.attr)
    return frozenset(defined), frozenset(c.name for c in classes), frozenset(members)


@functools.lru_cache(maxsize=1)
def _stdlib_exports() -> dict[str, str]:
    """Public names of :data:`_EXPORTING_MODULES` → their module (first one wins)."""
    exports: dict[str, str] = {}
    for module in _EXPORTING_MODULES:
        try:
            names = dir(importlib.import_module(module))
        except ImportError:  # pragma: no cover - standard library
            continue
        for name in names:
            if not name.startswith("_"):
                exports.setdefault(name, module)
    return exports


@functools.lru_cache(maxsize=4096)
def plan_test(
    source: str,
    entry_points: tuple[str, ...] | None = None,
    classes: tuple[str, ...] = (),
    members: tuple[str, ...] = (),
) -> TestPlan:
    """The plan of one test (cached: the answers of a group share their tests); ``entry_points``/``classes``/
    ``members`` as :func:`program_names` reads them (``None``: infer from the test). A test that does not parse is
    sent unchanged: the judge fails it (``test does not compile``), which is the dataset's fault for every answer."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return TestPlan(source, (), ())
    bound, loaded, defined = _names(tree)
    free = loaded - bound
    called, roots = _uses(tree)
    undefined: dict[str, str] = {}
    if entry_points is not None:
        remote = free & set(entry_points)
        rest = free - remote - _BUILTINS
        modules = {n for n in rest if n in _STDLIB}
        for name in rest - modules:
            undefined[name] = "not an entry point, a name of the reference, a builtin or a standard-library module"
    else:
        candidates = free - _BUILTINS
        modules = {n for n in candidates if n in _STDLIB and (n in roots or n not in called)}
        rest = candidates - modules
        for name in rest:
            if name in roots and name not in called:
                undefined[name] = "used as a module, but neither imported by the test nor a standard-library module"
        if len(rest) > 1:
            exports = _stdlib_exports()
            for name in rest - set(undefined):
                if name in exports and (name[:1].isupper() or name in _LOWERCASE_CLASS_EXPORTS):
                    undefined[name] = f"{exports[name]}.{name}, which the test does not import"
        remote = rest - set(undefined)
    classes = tuple(sorted(remote & set(classes)))
    why = None
    if undefined:
        why = "reads " + "; ".join(f"{n!r} ({undefined[n]})" for n in sorted(undefined))
    weak = _static_weakness(tree, set(remote), defined)
    rewriter = _WriteBackCalls(set(remote) | _parameters(tree))
    tree = rewriter.rewrite(tree)
    if rewriter.changed:
        source = ast.unparse(ast.fix_missing_locations(tree))
    members = tuple(sorted(members)) if classes else ()
    return TestPlan(source, tuple(sorted(remote)), tuple(sorted(modules)), weak, classes, why, members)


def weakly_verified_rows(
    tests_column: list[list[str] | None], rows: list[Mapping[str, Any]] | None = None
) -> dict[int, str]:
    """The rows of a dataset's ``tests`` column with a weakly verified test (row index → why), for a dataset report;
    ``rows`` (each row's columns) gives the declared program names."""
    return _rows_with(tests_column, rows, "weak")


def undefined_name_rows(
    tests_column: list[list[str] | None], rows: list[Mapping[str, Any]] | None = None
) -> dict[int, str]:
    """The rows with a test that reads a name the dataset does not define (row index → why): unscorable."""
    return _rows_with(tests_column, rows, "undefined")


def _rows_with(
    tests_column: list[list[str] | None], rows: list[Mapping[str, Any]] | None, field: str
) -> dict[int, str]:
    found: dict[int, str] = {}
    for row, tests in enumerate(tests_column):
        names = program_names(rows[row]) if rows is not None else ProgramNames()
        for t in tests or ():
            reason = getattr(plan_test(str(t), names.entry_points, names.classes, names.members), field)
            if reason is not None:
                found[row] = reason
                break
    return found


def _uses(tree: ast.Module) -> tuple[set[str], set[str]]:
    """(names called directly, ``name(...)``; names used as an attribute's root, ``name.attr``)."""
    called: set[str] = set()
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            called.add(node.func.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            roots.add(node.value.id)
    return called, roots


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


#: Fields of a statement that hold other statements (not part of its own expressions).
_BODY_FIELDS = frozenset({"body", "orelse", "finalbody", "handlers", "cases"})


class _WriteBackCalls(ast.NodeTransformer):
    """Calls of the program (a remote name or a parameter: HumanEval's ``candidate``) that get the program's changes
    written back (module docstring): a call made as a statement (``__loo_statement_call__(f, args)``), or one with a
    variable argument that its statement reads only there (``__loo_mutating_call__(f, args)``: written back only if
    it returned ``None``). The judge writes back only when ``f`` is in fact the program's."""

    def __init__(self, program: set[str]) -> None:
        self.changed = False
        self.program = program
        self._once: set[str] = set()

    def rewrite(self, tree: ast.Module) -> ast.Module:
        for stmt in [n for n in ast.walk(tree) if isinstance(n, ast.stmt)]:
            fields = [(f, v) for f, v in ast.iter_fields(stmt) if f not in _BODY_FIELDS]
            counts: dict[str, int] = {}
            for _, value in fields:
                for part in value if isinstance(value, list) else [value]:
                    if isinstance(part, ast.AST):
                        for node in ast.walk(part):
                            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                                counts[node.id] = counts.get(node.id, 0) + 1
            self._once = {name for name, n in counts.items() if n == 1}
            for field, value in fields:
                if isinstance(value, list):
                    setattr(stmt, field, [self.visit(v) if isinstance(v, ast.AST) else v for v in value])
                elif isinstance(value, ast.AST):
                    top = isinstance(stmt, ast.Expr) and value is stmt.value
                    setattr(stmt, field, self._visit_top(value) if top else self.visit(value))
        return tree

    def _visit_top(self, node: ast.expr) -> ast.expr:
        """The value of an expression statement: a call there always writes back (any call: through a test variable
        holding the program's object, ``sol.rotate(m)``, or an alias, ``g = f; g(xs)``; the judge writes back only
        into calls that are in fact the program's)."""
        func = node.func if isinstance(node, ast.Call) else None
        builtin = isinstance(func, ast.Name) and func.id in _BUILTINS and func.id not in self.program
        if func is not None and not builtin:
            self.generic_visit(node)
            return self._wrap(node, STATEMENT_CALL)
        return self.visit(node)

    def visit_Call(self, node: ast.Call) -> ast.expr:  # noqa: N802 - ast.NodeTransformer's naming
        self.generic_visit(node)
        if _is_program_call(node.func, self.program) and any(
            isinstance(a, ast.Name) and a.id in self._once for a in node.args
        ):
            return self._wrap(node, MUTATING_CALL)
        return node

    def _wrap(self, call: ast.Call, helper: str) -> ast.Call:
        self.changed = True
        return ast.Call(ast.Name(helper, ast.Load()), [call.func, *call.args], call.keywords)
