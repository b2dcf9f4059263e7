"""Split assert tests so that expected values never enter the sandbox (host-side oracle for :class:`CodeVerifier`).

A test such as ``assert f([3, 1]) == [1, 3]`` is cut on the host (Python's ``ast``) into

* the **calls** to evaluate, ``f([3, 1])``: the sandbox runs only the program and these calls and returns each
  result as plain data (:mod:`.plain_data`);
* the **verdict**, ``<value> == [1, 3]``: evaluated on the host, in our code, on the decoded values.

The sandboxed test is the original test with each split assert replaced by ``__loo_probe__(k, lambda: call, ...)``
and host-only constants removed, so the program can read the calls' arguments (its inputs) but never the expected
values; an object with a lying ``__eq__``, ``unittest.mock.ANY``, a patched builtin or a forged result line has
nothing to lie to. The HumanEval form ``def check(candidate): ...`` + ``check(entry_point)`` is split the same way
(``candidate`` is the entry point; the asserts keep their function scope).

What is evaluated where (an expression's *kind*):

* ``CONST``: constants, host-only names bound to constants, and whitelisted builtins / ``math`` functions of them —
  computed on the host;
* ``CAND``: a candidate name (a function of the program under test) and calls of it or of its attributes: computed
  in the sandbox, its value returned;
* ``MIX``: host operations (comparisons, ``and``/``or``/``not``, arithmetic, indexing, whitelisted builtins and
  ``str``/``list``/``dict`` methods) over ``CONST`` and ``CAND`` parts: computed on the host;
* ``REF``: anything else computed in the sandbox — a helper defined by the test or the program, a library call, a
  name bound in a loop. An assert whose verdict needs a ``REF`` value cannot be split (the program could tamper with
  the reference computation) and runs **in the sandbox**, as before; such asserts are counted per test
  (``weak_asserts``) and reported in the verifier's ``details``.
"""

from __future__ import annotations

import ast
import builtins
import copy
import functools
from dataclasses import dataclass, field
from typing import Any

from .plain_data import HOST_FUNCTIONS, HOST_MATH, HOST_TYPES, HostEvalError, host_eval, host_function

CONST, CAND, MIX, REF = "const", "cand", "mix", "ref"
PROBE = "__loo_probe__"
_BUILTINS = frozenset(dir(builtins))
#: Methods of plain values that the host evaluates itself (a method of a returned value is the host's business:
#: evaluated in the sandbox, a returned object could answer ``startswith`` with whatever the test expects).
HOST_METHODS = frozenset(
    "startswith endswith lower upper strip lstrip rstrip split count find index isdigit isalpha isalnum isupper "
    "islower isspace title capitalize keys values items get copy".split()
)


@dataclass
class Probe:
    """One split assert: ``len(calls)`` values come from the sandbox; ``verdict`` (host AST) decides it.

    ``verdict`` refers to the values as ``__v0``, ``__v1``, ...; ``once`` is true when the assert sits directly in
    the test's body (it must report exactly once), false inside a loop / branch (any number of reports).
    """

    index: int
    calls: list[str]
    verdict: ast.expr
    once: bool
    source: str


@dataclass
class SplitTest:
    """How one test (one entry of the ``tests`` column) is checked."""

    sandbox_source: str
    probes: list[Probe] = field(default_factory=list)
    host_env: dict[str, Any] = field(default_factory=dict)
    weak_asserts: int = 0

    @property
    def mode(self) -> str:
        """``"split"`` (every assert judged on the host), ``"in_sandbox"`` (none), or ``"mixed"``."""
        if not self.probes:
            return "in_sandbox"
        return "mixed" if self.weak_asserts else "split"


def program_names(code: str) -> tuple[set[str], set[str]]:
    """(names the program binds at module level, classes among them); empty sets if it does not parse."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return set(), set()
    names: set[str] = set()
    classes: set[str] = set()
    stack: list[ast.AST] = list(tree.body)
    while stack:  # module level only: a function's locals shadow nothing for the tests
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            if isinstance(node, ast.ClassDef):
                classes.add(node.name)
            continue
        if isinstance(node, ast.Lambda):
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        stack.extend(ast.iter_child_nodes(node))
    return names, classes


def split_test(source: str, program: str = "") -> SplitTest:
    """Split one test for ``program``; a test that cannot be parsed runs in the sandbox unchanged.

    Only the names the program binds at module level matter, so the split is cached on (test, names): the answers
    of a group share their tests.
    """
    names, classes = program_names(program)
    return _split_cached(source, frozenset(names), frozenset(classes))


@functools.lru_cache(maxsize=4096)
def _split_cached(source: str, names: frozenset[str], classes: frozenset[str]) -> SplitTest:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        return SplitTest(source, weak_asserts=source.count("assert"))
    forced: set[str] = set()
    for _ in range(4):  # fixed point: host constants the sandbox also reads become sandbox values
        splitter = _Splitter(tree, set(names), set(classes), forced)
        result = splitter.run()
        need = splitter.constants_read_in_sandbox(result.sandbox_source) - forced
        if not need:
            return result
        forced |= need
    return SplitTest(source, weak_asserts=sum(isinstance(n, ast.Assert) for n in ast.walk(tree)))


class _Splitter:
    def __init__(self, tree: ast.Module, program: set[str], classes: set[str], forced: set[str]) -> None:
        self.tree = ast.parse(ast.unparse(tree))  # a private copy we may rewrite
        self.program, self.classes, self.forced = program, classes, forced
        self.entry, self.check_params = _humaneval_form(self.tree)
        self.bound = _bound_names(self.tree)
        self.kinds: dict[str, str] = {}
        self.host_env: dict[str, Any] = {}
        self.probes: list[Probe] = []
        self.weak = 0
        self.removed_constants: set[str] = set()

    # -- names ---------------------------------------------------------------------------------------------

    def name_kind(self, name: str) -> str:
        if name in self.kinds:
            return self.kinds[name]
        if name in self.check_params:
            return CAND
        if name in self.bound:
            return REF
        if self.entry is not None:  # HumanEval: only the entry point is under test; other helpers are trusted code
            return CAND if name == self.entry else REF
        if name in self.program and name in _BUILTINS:
            return REF  # the program shadows a builtin the test uses
        if name in _BUILTINS:
            return CONST if name in HOST_TYPES else REF
        return CAND

    # -- expressions ---------------------------------------------------------------------------------------

    def kind(self, node: ast.AST) -> str:
        """The kind of an expression (module docstring)."""
        if isinstance(node, ast.Constant):
            return CONST
        if isinstance(node, ast.Name):
            return self.name_kind(node.id)
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return self._combine([self.kind(e) for e in node.elts])
        if isinstance(node, ast.Dict):
            if any(k is None for k in node.keys):
                return REF
            return self._combine([self.kind(e) for e in [*node.keys, *node.values]])
        if isinstance(node, (ast.UnaryOp, ast.BinOp, ast.BoolOp, ast.Compare, ast.IfExp)):
            return self._combine([self.kind(c) for c in ast.iter_child_nodes(node) if isinstance(c, ast.expr)])
        if isinstance(node, ast.Subscript):
            base, index = self.kind(node.value), self._slice_kind(node.slice)
            if base == CAND and index not in (CONST, MIX):
                return CAND
            return self._combine([base, index])
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == "math" and node.attr in HOST_MATH:
                return CONST  # the real math module's, on the host (whatever the program binds to "math")
            return CAND if self.kind(node.value) == CAND else REF
        if isinstance(node, ast.Call):
            return self._call_kind(node)
        return REF

    def _slice_kind(self, node: ast.AST) -> str:
        if isinstance(node, ast.Slice):
            return self._combine([self.kind(p) for p in (node.lower, node.upper, node.step) if p is not None])
        return self.kind(node)

    def _call_kind(self, node: ast.Call) -> str:
        func = node.func
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            return CAND if self.kind(func) == CAND else REF
        args = [self.kind(a) for a in [*node.args, *(k.value for k in node.keywords)]]
        if isinstance(func, ast.Attribute) and func.attr in HOST_METHODS and not self._candidate_object(func.value):
            base = self.kind(func.value)
            if base in (CAND, MIX):  # a method of a returned value: judged on the host
                return self._combine([MIX, *args])
        if self.kind(func) == CAND:
            return CAND  # the program's own code, any arguments (they are its inputs)
        if self._host_callable(func):
            kind = self._combine(args) if args else CONST
            return MIX if kind == CAND else kind
        return REF

    def _candidate_object(self, node: ast.AST) -> bool:
        """``Solution()`` (an instance of a class of the program): its methods are the program's code."""
        return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in self.classes

    def _host_callable(self, func: ast.AST) -> bool:
        if isinstance(func, ast.Name):
            return func.id in HOST_FUNCTIONS and func.id not in self.bound and func.id not in self.program
        return isinstance(func, ast.Attribute) and self.kind(func) == CONST and host_function(func) is not None

    @staticmethod
    def _combine(kinds: list[str]) -> str:
        if REF in kinds:
            return REF
        if not kinds or all(k == CONST for k in kinds):
            return CONST
        return MIX

    # -- building the host verdict -------------------------------------------------------------------------

    def host_tree(self, node: ast.expr, calls: list[str]) -> ast.expr:
        """``node`` with every maximal ``CAND`` part replaced by a placeholder ``__v<j>`` (its source → ``calls``)."""
        if self.kind(node) == CAND:
            calls.append(ast.unparse(node))
            return ast.Name(id=f"__v{len(calls) - 1}", ctx=ast.Load())

        class Replace(ast.NodeTransformer):
            def visit(inner, child: ast.AST) -> ast.AST:  # noqa: N805 - closure over the splitter
                if isinstance(child, ast.expr):
                    kind = self.kind(child)
                    if kind == CAND and child is not node:
                        return self.host_tree(child, calls)
                    if kind == CONST:
                        return child  # wholly the host's (e.g. ``math.pi``): nothing inside goes to the sandbox
                if isinstance(child, ast.Call) and isinstance(child.func, ast.Attribute):
                    if child.func.attr in HOST_METHODS:  # a method of a returned value: only the value is a call
                        child.func.value = inner.visit(child.func.value)
                        child.args = [inner.visit(a) for a in child.args]
                        for keyword in child.keywords:
                            keyword.value = inner.visit(keyword.value)
                        return child
                return ast.NodeTransformer.generic_visit(inner, child)

        return Replace().visit(_copy(node))

    # -- statements ----------------------------------------------------------------------------------------

    def run(self) -> SplitTest:
        self._bind_constants(self.tree.body)
        if self.entry is not None:
            check = next(s for s in self.tree.body if isinstance(s, ast.FunctionDef) and s.name == "check")
            self._bind_constants(check.body)
        self.tree = self._rewrite(self.tree, once=True)
        ast.fix_missing_locations(self.tree)
        source = ast.unparse(self.tree)
        env = {k: v for k, v in self.host_env.items() if k not in self.forced}
        return SplitTest(source, self.probes, env, self.weak)

    def _bind_constants(self, body: list[ast.stmt]) -> None:
        """Host constants: ``name = <CONST>`` directly in ``body``, the name bound nowhere else."""
        counts = self.bound
        for stmt in body:
            if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)):
                continue
            name = stmt.targets[0].id
            if counts.get(name) != 1 or name in self.forced or name == PROBE:
                continue
            kind = self.kind(stmt.value)
            if kind == CAND:  # ``result = candidate(x)``: the program's output, a sandbox value
                self.kinds[name] = CAND
                continue
            if kind != CONST:
                continue
            try:
                self.host_env[name] = host_eval(stmt.value, dict(self.host_env))
            except Exception:  # noqa: BLE001 - not evaluable on the host: stays a sandbox value
                continue
            self.kinds[name] = CONST
        for name in self.forced:
            self.kinds[name] = CAND

    def _rewrite(self, node: ast.AST, once: bool) -> ast.AST:
        splitter = self

        class Rewriter(ast.NodeTransformer):
            def __init__(inner, depth_once: bool) -> None:  # noqa: N805
                inner.once = depth_once

            def visit_Assert(inner, stmt: ast.Assert) -> ast.stmt:  # noqa: N802, N805
                return splitter._assert(stmt, inner.once)

            def visit_Assign(inner, stmt: ast.Assign) -> ast.stmt:  # noqa: N802, N805
                target = stmt.targets[0] if len(stmt.targets) == 1 else None
                if isinstance(target, ast.Name) and splitter.kinds.get(target.id) == CONST:
                    splitter.removed_constants.add(target.id)
                    return ast.copy_location(ast.Pass(), stmt)  # a host-only constant never enters the sandbox
                return stmt

            def generic_visit(inner, child: ast.AST) -> ast.AST:  # noqa: N805
                if isinstance(child, (ast.For, ast.AsyncFor, ast.While, ast.If, ast.Try, ast.With, ast.AsyncWith)):
                    saved, inner.once = inner.once, False
                    out = ast.NodeTransformer.generic_visit(inner, child)
                    inner.once = saved
                    return out
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                    is_check = isinstance(child, ast.FunctionDef) and child.name == "check" and splitter.entry
                    saved, inner.once = inner.once, bool(is_check) and inner.once
                    out = ast.NodeTransformer.generic_visit(inner, child)
                    inner.once = saved
                    return out
                return ast.NodeTransformer.generic_visit(inner, child)

        return Rewriter(once).visit(node)

    def _assert(self, stmt: ast.Assert, once: bool) -> ast.stmt:
        if self.kind(stmt.test) == REF:
            self.weak += 1
            return stmt
        calls: list[str] = []
        verdict = self.host_tree(stmt.test, calls)
        index = len(self.probes)
        self.probes.append(Probe(index, calls, verdict, once, ast.unparse(stmt)))
        lambdas = [ast.Lambda(args=_no_args(), body=ast.parse(c, mode="eval").body) for c in calls]
        call = ast.Call(ast.Name(PROBE, ast.Load()), [ast.Constant(index), *lambdas], [])
        return ast.copy_location(ast.Expr(call), stmt)

    def constants_read_in_sandbox(self, source: str) -> set[str]:
        """Host constants that the sandboxed source reads (they must be sandbox values, not removed)."""
        loads = {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
        return loads & set(self.host_env)


def _no_args() -> ast.arguments:
    return ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[])


def _copy(node: ast.expr) -> ast.expr:
    return ast.parse(ast.unparse(node), mode="eval").body


def _bound_names(tree: ast.Module) -> dict[str, int]:
    """How many times each name is bound anywhere in the test (assignments, loops, imports, defs, parameters)."""
    counts: dict[str, int] = {}

    def add(name: str) -> None:
        counts[name] = counts.get(name, 0) + 1

    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            add(node.name)
        elif isinstance(node, ast.arg):
            add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            for alias in node.names:
                add((alias.asname or alias.name).split(".")[0])
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                counts[name] = counts.get(name, 0) + 2  # never a host constant
        elif isinstance(node, ast.ExceptHandler) and node.name:
            add(node.name)
        elif isinstance(node, (ast.AugAssign, ast.For, ast.comprehension)):
            for target in ast.walk(node.target):
                if isinstance(target, ast.Name):
                    counts[target.id] = counts.get(target.id, 0) + 2
    return counts


def _humaneval_form(tree: ast.Module) -> tuple[str | None, set[str]]:
    """``(entry point, {param})`` for ``def check(param): ...`` + a final ``check(<name>)``; else ``(None, set())``."""
    body = tree.body
    if not body or not isinstance(body[-1], ast.Expr) or not isinstance(body[-1].value, ast.Call):
        return None, set()
    call = body[-1].value
    if not (isinstance(call.func, ast.Name) and call.func.id == "check" and len(call.args) == 1 and not call.keywords):
        return None, set()
    if not isinstance(call.args[0], ast.Name):
        return None, set()
    defs = [s for s in body if isinstance(s, ast.FunctionDef) and s.name == "check"]
    if len(defs) != 1 or len(defs[0].args.args) != 1 or defs[0].args.vararg or defs[0].args.kwonlyargs:
        return None, set()
    return call.args[0].id, {defs[0].args.args[0].arg}


def judge(probe: Probe, values: list[Any], host_env: dict[str, Any]) -> tuple[bool, str]:
    """Decide one report of ``probe`` on the host: ``values`` are decoded values or ``("error", reason)`` markers.

    Returns ``(passed, reason)``; the reason of a false verdict is ``"AssertionError"`` (as the in-sandbox form).
    """
    env = copy.deepcopy(host_env) if host_env else {}  # the plan is cached and shared: never mutate its constants
    for j, value in enumerate(values):
        env[f"__v{j}"] = value
    try:
        verdict = host_eval(probe.verdict, _Lazy(env))
    except _ProbeFailed as err:
        return False, str(err)
    except HostEvalError as err:
        return False, f"host: {err}"
    except Exception as err:  # noqa: BLE001 - the test's own expression raised on these values (as it would in Python)
        return False, type(err).__name__
    try:
        passed = bool(verdict)
    except Exception as err:  # noqa: BLE001
        return False, type(err).__name__
    return (True, "passed") if passed else (False, "AssertionError")


class _ProbeFailed(Exception):
    pass


class ProbeError:
    """A value that could not be obtained in the sandbox (the call raised, or returned non-plain data)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason


class _Lazy(dict):
    """An environment that raises the sandbox's error only if the verdict actually needs that value."""

    def __getitem__(self, key: str) -> Any:
        value = dict.__getitem__(self, key)
        if isinstance(value, ProbeError):
            raise _ProbeFailed(value.reason)
        return value
