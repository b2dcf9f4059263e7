"""How one test is run by the judge: which of its names are the program's, and whether it can be judged at all.

The host reads the **dataset** (the test, the row's ``entry_points`` / ``reference``; docs/rewards.md) and, in one
case only (below), the names the program defines at its top level. ``entry_points`` is a name, a list, a JSON list
(``'["area"]'``) or a comma string (``"area, perimeter"``); a declaration that cannot be read (empty, no list of
names, a ``reference`` that is not Python 3 or defines nothing) is an error (:attr:`ProgramNames.error`): refused by
``prepare_dataset``, ``None`` (``undefined_name``) in the verifier, never inferred instead. With a declaration, a
name the test reads but never binds is: a declared entry point → the program's, always (even ``pow``); another name
of the reference (an oracle, a checker, a helper) → the reference's own, run in the judge, unless
:func:`_split_reference` makes it the program's (a class only built as the program's input; without
``entry_points``, the one entry each test calls on its actual side: ``solve`` in ``assert solve(n) == brute(n)``);
a builtin → the real one; a standard-library module (``math.isclose``) → the real module; anything else (``np``,
``Counter`` without an import) → **undefined**: the row is unscorable (``undefined_name``).

Without a declaration, the names are inferred from the test alone: every free name that is not a builtin, except a
standard-library module used as one (``math.pi``; one only *called*, ``calendar(2024)``, is the program's), a name
used only as a module that is no standard-library module (undefined), and, when the test reads more than one such
name, a public name of a common standard-library module the test forgot to import, whatever its case (undefined:
``Counter``, ``deque``, and ``isclose``, ``sqrt``, ``deepcopy`` unless every use is an entry point's,
:func:`_entry_like`: ``assert add(1, 2) == 3``). A test that reads no name of the program, only builtins, takes the
one builtin the program defines at its top level (``def pow``) as the program's (:attr:`TestPlan.claimed`).

Objects come back only from the reference's ``classes`` (and their methods), answering only their ``members``. A
call of the program made as a statement (``f(xs)``) becomes ``__loo_statement_call__(f, xs)`` (its changes to the
arguments are written back); a call in an expression with a variable argument its statement reads nowhere else,
``__loo_mutating_call__`` (written back only when it returned ``None``). A test that must hand the program something
that is not plain data is **weakly verified**: ``CodeVerifier(weak_tests=...)`` decides what it earns.
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib
import json
import keyword
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field as _field
from typing import Any

STATEMENT_CALL = "__loo_statement_call__"
#: A call inside an expression whose changes are written back only when it returned ``None`` (module docstring).
MUTATING_CALL = "__loo_mutating_call__"
#: The judge-side namespace of a row's reference (:func:`_judge_side_reference`).
REFERENCE_NAMESPACE = "__loo_reference__"
_BUILTINS = frozenset(dir(builtins))
_STDLIB = frozenset(getattr(sys, "stdlib_module_names", ())) - {"__future__"}
#: Modules whose public names a test commonly uses after an import it left out (inference mode only).
_EXPORTING_MODULES = (
    "collections", "itertools", "functools", "math", "cmath", "fractions", "decimal", "heapq", "bisect", "string",
    "operator", "statistics", "re", "copy", "datetime", "random", "typing", "array", "json", "textwrap", "pathlib",
)  # fmt: skip
#: Lower-case standard-library classes: undefined wherever used (another lower-case export: :func:`_entry_like`).
_LOWERCASE_CLASS_EXPORTS = frozenset({"defaultdict", "deque", "namedtuple"})


@dataclass(frozen=True)
class TestPlan:
    """One test as the judge runs it.

    Attributes:
        source: the test's source (write-back calls rewritten, the reference's judge-side functions bound first).
        remote: the program's names the test uses (remote references in the judge), sorted.
        modules: standard-library modules the test uses without importing them, sorted.
        weak: why the test cannot be judged across the boundary, or ``None``.
        classes: the names in ``remote`` whose calls may return an object (the reference's classes).
        undefined: why the test reads a name the dataset does not define (the row is unscorable), or ``None``.
        claimed: the builtin the program's own definition made the program's (a "weak" verdict is then a fail).
        helpers: the reference's names the test reads that run in the judge, sorted.
    """

    source: str
    remote: tuple[str, ...]
    modules: tuple[str, ...]
    weak: str | None = None
    classes: tuple[str, ...] = ()
    undefined: str | None = None
    members: tuple[str, ...] = ()
    claimed: tuple[str, ...] = ()
    helpers: tuple[str, ...] = ()

    def wire(self) -> tuple[str, list[str], list[str], list[str], list[str]]:
        """What the runner receives for this test."""
        return self.source, list(self.remote), list(self.modules), list(self.classes), list(self.members)


@dataclass(frozen=True)
class ProgramNames:
    """A row's names, read from the dataset: ``entry_points`` (the declared ones and the reference's top-level
    functions and classes; ``None``: inferred from each test), ``classes`` (may return objects), ``members`` (all a
    handle answers), ``undeclared`` (the reference's names that are not declared: run in the judge from
    ``reference``, its definitions, unless :func:`_split_reference` makes them the program's; ``pick``: no
    ``entry_points``), ``error`` (why the declaration cannot be read: the row cannot be judged)."""

    entry_points: tuple[str, ...] | None = None
    classes: tuple[str, ...] = ()
    members: tuple[str, ...] = ()
    undeclared: tuple[str, ...] = _field(default=(), compare=False)
    pick: bool = _field(default=False, compare=False)
    reference: str = _field(default="", compare=False)
    error: str | None = _field(default=None, compare=False)


def program_names(columns: Mapping[str, Any]) -> ProgramNames:
    """The program's names of one row: its ``entry_points`` (:func:`read_entry_points`) and the top-level functions
    and classes of its ``reference`` (a solution or a stub); ``ProgramNames(error=...)`` when either cannot be read."""
    try:
        declared = read_entry_points(columns.get("entry_points"))
        ref = _read_reference(columns.get("reference"))
    except ValueError as err:
        return ProgramNames(error=str(err))
    if declared is None and ref is None:
        return ProgramNames()
    names = set(declared or ())
    if ref is None:
        return ProgramNames(_sorted(names))
    every = {*ref.functions, *ref.classes}
    undeclared, text = _sorted(every - names), ref.definitions if every - names else ""
    return ProgramNames(_sorted(names | every), ref.classes, ref.members, undeclared, declared is None, text)


def _sorted(names: set[str] | frozenset[str]) -> tuple[str, ...]:
    return tuple(sorted(names))


def read_entry_points(value: Any) -> tuple[str, ...] | None:
    """The names an ``entry_points`` value declares (a name, a list, a JSON or Python list as a string, a comma
    string); ``None`` when absent; ``ValueError`` naming the column when it is empty or no such value."""
    if value is None:
        return None
    items: Any = value
    if isinstance(value, str) and (text := value.strip())[:1] in ("[", "("):
        items = _literal(text)
    elif isinstance(value, str):
        items = [part.strip() for part in text.split(",")] if text else []
    if not isinstance(items, (list, tuple)):
        raise ValueError(f"column 'entry_points': {repr(value)[:80]} is not a name or a list of names")
    if not items:
        raise ValueError("column 'entry_points': empty (declare at least one name, or leave the value out)")
    names = tuple(item.strip() if isinstance(item, str) else item for item in items)
    for name in names:
        if not (isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name)):
            raise ValueError(f"column 'entry_points': {repr(name)[:80]} in {repr(value)[:80]} is not a name")
    return names


def _literal(text: str) -> Any:  # a JSON or Python literal's value, else None
    for parse in (json.loads, ast.literal_eval):
        try:
            return parse(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            continue
    return None


@dataclass(frozen=True)
class _Reference:
    functions: tuple[str, ...]
    classes: tuple[str, ...]
    members: tuple[str, ...]
    definitions: str  # the imports, definitions and assignments of the reference, for the judge


def _read_reference(value: Any) -> _Reference | None:
    """The names of a ``reference`` value (``None`` when absent: ``None`` or blank); ``ValueError`` (naming the
    column) when it is not Python 3 text defining at least one top-level function or class."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    reference = _reference_names(value) if isinstance(value, str) else f"a {type(value).__name__}, not Python source"
    if isinstance(reference, str):
        raise ValueError(f"column 'reference': {reference}")
    return reference


@functools.lru_cache(maxsize=1024)
def _reference_names(reference: str) -> _Reference | str:
    """The reference's top-level functions, classes, members of the classes (methods, class attributes, ``self.x``)
    and definitions; or why it cannot be read."""
    try:
        tree = ast.parse(reference)
    except (SyntaxError, ValueError, MemoryError, RecursionError) as err:
        where = f": {err.msg}, line {err.lineno}" if isinstance(err, SyntaxError) else ""
        return f"does not parse as Python 3 ({type(err).__name__}{where})"
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    functions = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef)]
    if not functions and not classes:
        return "defines no top-level function or class"
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
    # what the judge runs: the definitions only (no top-level calls, prints, reads of stdin, __main__ blocks)
    keep = (*kinds, ast.Import, ast.ImportFrom, ast.Assign, ast.AnnAssign)
    try:
        definitions = ast.unparse(ast.Module([n for n in tree.body if isinstance(n, keep)], []))
    except (ValueError, RecursionError):  # pragma: no cover - a tree ast.parse built
        return "cannot be rewritten for the judge"
    return _Reference(_sorted(functions), _sorted({c.name for c in classes}), _sorted(members), definitions)


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


def plan_for(source: str, names: ProgramNames, builtins_defined: tuple[str, ...] = ()) -> TestPlan:
    """:func:`plan_test` with a row's :class:`ProgramNames` (and, for an undeclared row, the builtins the program
    defines at its top level)."""
    row = (names.entry_points, names.classes, names.members, names.undeclared, names.pick, names.reference)
    return plan_test(source, *row, builtins_defined if names.entry_points is None else ())


@functools.lru_cache(maxsize=4096)
def plan_test(
    source: str,
    entry_points: tuple[str, ...] | None = None,
    classes: tuple[str, ...] = (),
    members: tuple[str, ...] = (),
    undeclared: tuple[str, ...] = (),
    pick: bool = False,
    reference: str = "",
    builtins_defined: tuple[str, ...] = (),
) -> TestPlan:
    """The plan of one test (cached: the answers of a group share their tests); ``entry_points``/``classes``/
    ``members``/``undeclared``/``pick``/``reference`` as :func:`program_names` reads them (``entry_points=None``:
    infer from the test), ``builtins_defined``: the builtins the program defines at its top level (undeclared rows).
    A test that does not parse is sent unchanged: the judge fails it (``test does not compile``), which is the
    dataset's fault for every answer."""
    try:
        tree = ast.parse(source)
        uses = _ordered_uses(tree)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return TestPlan(source, (), ())
    bound, loaded, defined = _names(tree)
    free = loaded - bound
    called, roots = _uses(tree)
    undefined: dict[str, str] = {}
    helpers: set[str] = set()
    claimed: set[str] = set()
    if entry_points is not None:
        read, declared = free & set(undeclared), free & (set(entry_points) - set(undeclared))
        flows = _origins(tree) if read else ({}, {})
        program = _split_reference(uses, flows, read, declared, set(classes), pick) if read else set()
        helpers = read - program if reference else set()
        remote = declared | program
        rest = free - remote - helpers - _BUILTINS
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
            fed = _reach(_origins(tree)[1], rest | _parameters(tree))
            for name in rest - set(undefined):
                if name not in exports:
                    continue
                if name[:1].isupper() or name in _LOWERCASE_CLASS_EXPORTS or not _entry_like(name, uses, fed - {name}):
                    undefined[name] = f"{exports[name]}.{name}, which the test does not import"
        remote = rest - set(undefined)
        if not remote and not undefined and builtins_defined:
            claim = free & _BUILTINS & set(builtins_defined)
            if len(claim) == 1 and _static_weakness(tree, claim, defined) is None:
                remote = claimed = claim
    classes = _sorted(remote & set(classes))
    why = None
    if undefined:
        why = "reads " + "; ".join(f"{n!r} ({undefined[n]})" for n in sorted(undefined))
    weak = _static_weakness(tree, set(remote), defined | helpers)
    rewriter = _WriteBackCalls(set(remote) | _parameters(tree))
    tree = rewriter.rewrite(tree)
    if helpers:
        tree = _judge_side_reference(tree, reference, sorted(helpers))
    if rewriter.changed or helpers:
        source = ast.unparse(ast.fix_missing_locations(tree))
    members = _sorted(set(members)) if classes else ()
    return TestPlan(
        source, _sorted(remote), _sorted(modules), weak, classes, why, members, _sorted(claimed), _sorted(helpers)
    )


def _judge_side_reference(tree: ast.Module, reference: str, helpers: list[str]) -> ast.Module:
    """``tree`` with the reference's ``helpers`` bound first (after any ``from __future__`` import), from its
    definitions executed in a namespace of their own in the judge: the dataset's code, never the program's."""
    space = REFERENCE_NAMESPACE
    lines = [f"{space} = {{'__name__': 'reference'}}", f"exec({reference!r}, {space})"]
    lines += [f"{name} = {space}[{name!r}]" for name in helpers]
    future = [isinstance(n, ast.ImportFrom) and n.module == "__future__" for n in tree.body]
    at = future.index(False) if False in future else len(future)
    tree.body[at:at] = ast.parse("\n".join(lines)).body
    return tree


@dataclass(frozen=True)
class _Use:
    """One read of a name in a test, in evaluation order (a call after its arguments)."""

    name: str
    called: bool
    checked: bool  # inside an ``assert``'s condition
    expected: bool  # inside a comparator of a comparison (``x == <here>``): the test's expected side
    reads: frozenset[str]  # the names the call's arguments read (a call), else empty
    within: frozenset[str]  # the roots of the calls whose arguments hold this read (``f`` of ``f(g(x))``, ``sol.f``)


def _ordered_uses(tree: ast.Module) -> list[_Use]:
    uses: list[_Use] = []

    def visit(node: ast.AST, checked: bool, expected: bool, within: frozenset[str]) -> None:
        if isinstance(node, ast.Assert):
            visit(node.test, True, expected, within)
            if node.msg is not None:
                visit(node.msg, False, expected, within)
        elif isinstance(node, ast.Compare):
            visit(node.left, checked, expected, within)
            for comparator in node.comparators:
                visit(comparator, checked, True, within)
        elif isinstance(node, ast.Call):
            arguments, root = [*node.args, *(k.value for k in node.keywords)], node.func
            while isinstance(root, (ast.Attribute, ast.Call, ast.Subscript)):
                root = root.func if isinstance(root, ast.Call) else root.value
            for argument in arguments:
                visit(argument, checked, expected, within | ({root.id} if isinstance(root, ast.Name) else set()))
            if isinstance(node.func, ast.Name):
                reads = frozenset(set().union(*map(_read_names, arguments)))
                uses.append(_Use(node.func.id, True, checked, expected, reads, within))
            else:
                visit(node.func, checked, expected, within)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            uses.append(_Use(node.id, False, checked, expected, frozenset(), within))
        else:
            for child in ast.iter_child_nodes(node):
                visit(child, checked, expected, within)

    visit(tree, False, False, frozenset())
    return uses


#: Nodes that bind names: (the field holding the value, the field holding the target or targets).
_BINDINGS: dict[type, tuple[str, str]] = {ast.Assign: ("value", "targets")}
_BINDINGS.update(dict.fromkeys((ast.AnnAssign, ast.AugAssign, ast.NamedExpr), ("value", "target")))
_BINDINGS.update(dict.fromkeys((ast.For, ast.AsyncFor, ast.comprehension), ("iter", "target")))
_BINDINGS[ast.withitem] = ("context_expr", "optional_vars")


def _origins(tree: ast.Module) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(each variable the test binds — assignments, loop and ``with`` targets, walruses — → the names its values read,
    each name → the variables whose values read it)."""
    origins: dict[str, set[str]] = {}
    users: dict[str, set[str]] = {}
    for node in ast.walk(tree):
        value, target = (getattr(node, field, None) for field in _BINDINGS.get(type(node), ("", "")))
        if value is not None and target is not None:
            for name in set().union(*map(_read_names, target if isinstance(target, list) else [target])):
                origins.setdefault(name, set()).update(reads := _read_names(value))
                for read in reads:
                    users.setdefault(read, set()).add(name)
    return origins, users


def _reach(edges: dict[str, set[str]], names: set[str] | frozenset[str]) -> set[str]:
    """``names`` and all that ``edges`` lead to from them, transitively (linear in the edges)."""
    seen, todo = set(names), list(names)
    while todo:
        todo.extend(n for n in edges.get(todo.pop(), ()) if n not in seen and not seen.add(n))
    return seen


def _read_names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _entry_like(name: str, uses: list[_Use], program: set[str]) -> bool:
    """Whether every use of ``name`` is an entry point's: a call in an ``assert``'s condition, outside comparators,
    whose arguments read nothing of the ``program`` (another candidate, a test function's parameter, or from one)."""
    mine = [u for u in uses if u.name == name]
    return bool(mine) and all(u.called and u.checked and not u.expected and not u.reads & program for u in mine)


def _split_reference(
    uses: list[_Use], flows: tuple[dict, dict], read: set[str], declared: set[str], classes: set[str], pick: bool
) -> set[str]:
    """Which of ``read`` (the reference's undeclared names the test reads) are the program's beside ``declared``: a
    class only ever the program's input (``Pair`` in ``f([Pair(1, 2)])``, also through variables) and, with ``pick``,
    the one *entry* (a function, or a class used otherwise) the test calls on its actual side (:func:`_actual`)."""

    origins, users = flows

    def inside(use: _Use, roots: set[str]) -> bool:
        return bool(_reach(origins, use.within) & (roots - {use.name}))

    def nested(name: str, roots: set[str]) -> bool:
        built = _reach(users, {name}) - _reach(users, roots - {name}) - {name}
        fed = [u for u in uses if u.name in built]  # reads of the variables it builds (not of the program's results)
        mine = [u for u in uses if u.name == name]
        return all(inside(u, roots) or not u.checked and all(inside(f, roots) for f in fed) for u in mine)

    inputs = {c for c in read & classes if nested(c, declared | read)}
    entries = read - inputs
    program = declared | ((entries if len(entries) < 2 else {_actual(uses, entries)}) if pick else set())
    for _ in range(len(inputs)):  # an input of an input of the program is the program's too
        program |= {c for c in inputs if nested(c, program)}
    return program & read


def _actual(all_uses: list[_Use], entries: set[str]) -> str:
    """The entry a test calls on its actual side: the first (a call after its arguments: ``solve`` of ``ok(solve(n))``)
    read in an ``assert``'s condition outside comparators, else the first read outside a comparator, else the first."""
    uses = [u for u in all_uses if u.name in entries]
    for accept in (lambda u: u.checked and not u.expected, lambda u: not u.expected, lambda u: True):
        for use in uses:
            if accept(use):
                return use.name
    return sorted(entries)[0]  # pragma: no cover - every name in ``entries`` is read by the test


def weakly_verified_rows(
    tests_column: list[list[str] | None], rows: list[Mapping[str, Any]] | None = None
) -> dict[int, str]:
    """The rows of a dataset's ``tests`` column with a weakly verified test (row index → why), for a dataset report;
    ``rows`` (each row's columns) gives the declared program names."""
    return _rows_with(tests_column, rows, "weak")


def undefined_name_rows(
    tests_column: list[list[str] | None], rows: list[Mapping[str, Any]] | None = None
) -> dict[int, str]:
    """The rows with a test that reads a name the dataset does not define, or whose declaration cannot be read
    (row index → why): unscorable."""
    return _rows_with(tests_column, rows, "undefined")


def _rows_with(
    tests_column: list[list[str] | None], rows: list[Mapping[str, Any]] | None, field: str
) -> dict[int, str]:
    found: dict[int, str] = {}
    for row, tests in enumerate(tests_column):
        names = program_names(rows[row]) if rows is not None else ProgramNames()
        if names.error is not None:
            if field == "undefined" and tests:
                found[row] = f"declares its names in a way that cannot be read ({names.error})"
            continue
        for t in tests or ():
            reason = getattr(plan_for(str(t), names), field)
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
        arguments = [*node.args, *(k.value for k in node.keywords)]  # keyword ones too (``f(xs=lst)``)
        if _is_program_call(node.func, self.program) and any(
            isinstance(a, ast.Name) and a.id in self._once for a in arguments
        ):
            return self._wrap(node, MUTATING_CALL)
        return node

    def _wrap(self, call: ast.Call, helper: str) -> ast.Call:
        self.changed = True
        return ast.Call(ast.Name(helper, ast.Load()), [call.func, *call.args], call.keywords)
