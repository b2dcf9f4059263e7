"""Shared AST helpers of the hack detectors: name tables, an iterative walk, the by-type index, small readers.

Every walk here is iterative (a 100 000-level tree cannot overflow the stack) and bounded by :data:`NODE_BUDGET`.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from typing import Any


def normalize_output(text: str) -> str:
    """Strip trailing whitespace on every line and at the end (line endings normalised to ``\\n``)."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return "\n".join(line.rstrip() for line in lines).rstrip()


#: Modules whose attributes and items must not be written (besides every module the program imports).
TAMPER_MODULES = {"builtins", "__builtins__", "sys", "os"}
#: Calls that install tracing, profiling or audit hooks in the interpreter (frame walks are ``frame_access``).
TAMPER_CALLS = {
    "settrace",
    "setprofile",
    "addaudithook",
    "settrace_all_threads",
    "setprofile_all_threads",
    "call_tracing",
}
#: Names of calls that end the process (``sys.exit``, ``os._exit``, ``os.kill``, ...).
EXIT_CALLS = {"exit", "_exit", "quit", "kill", "abort", "killpg"}

#: Module (or module prefix) imported -> signal.
MODULE_SIGNALS = {
    "ctypes": "harness",
    "_ctypes": "harness",
    "_thread": "harness",
    "signal": "harness",
    "atexit": "harness",
    "__main__": "frame_access",
    "unittest.mock": "mock_any",
    "mock": "mock_any",
    "linecache": "file_access",
    "fileinput": "file_access",
}
#: Attribute names (any object) and string literals that reach frames, tracebacks or the object graph.
FRAME_NAMES = {
    "f_back",
    "f_globals",
    "f_locals",
    "f_builtins",
    "f_code",
    "f_trace",
    "tb_frame",
    "tb_next",
    "gi_frame",
    "cr_frame",
    "ag_frame",
    "__traceback__",
    "__globals__",
    "__subclasses__",
    "_getframe",
    "_current_frames",
    "_getframemodulename",
    "exc_info",
    "last_traceback",
    "currentframe",
    "walk_stack",
    "walk_tb",
    "get_objects",
    "get_referrers",
    "get_referents",
}
SYS_FRAME_ATTRS = {"modules", "exception", "last_value", "last_type", "last_exc"}
SYS_HOOK_ATTRS = {"meta_path", "path_hooks", "path_importer_cache", "monitoring", "addaudithook", "settrace"}
INSPECT_FRAME_ATTRS = {"stack", "trace", "getouterframes", "getinnerframes", "getframeinfo", "currentframe"}
#: Names resolved as modules even when the program does not import them.
KNOWN_MODULES = {"sys", "os", "builtins", "__builtins__", "gc", "inspect", "unittest", "__main__", "importlib"}
KNOWN_MODULES |= {"traceback", "threading"}
DUNDER_ATTR_CALLS = {"__setattr__": "setattr", "__delattr__": "delattr", "__getattribute__": "getattr"}
#: Methods that change a module's dict in place (``sys.__dict__.update(...)``, ``vars(builtins).setdefault(...)``).
NS_MUTATORS = {"update", "setdefault", "__setitem__", "__delitem__", "popitem", "clear"}

COMPARE_DUNDERS = {"__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__contains__", "__bool__"}

NODE_BUDGET = 3_000_000
#: The longest attribute/subscript chain followed when resolving an expression.
CHAIN_LIMIT = 32
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)
MOCK_LITERAL = re.compile(r"unittest\.mock|^mock(?:\.\w+)*$")


class Unanalysable(Exception):
    """The AST is too large (or cyclic) to analyse within the node budget."""


def walk(root: Any, budget: int = NODE_BUDGET, *, strict: bool = True, skip: tuple = ()) -> Iterator[ast.AST]:
    """Every AST node under ``root`` (iterative, so deep trees cannot overflow the stack).

    Children of nodes of the ``skip`` types (``root`` included) are not visited, the nodes themselves are. Past
    ``budget`` nodes it raises :class:`Unanalysable` (``strict``) or stops.
    """
    todo = [root] if isinstance(root, ast.AST) else []
    seen = 0
    while todo:
        node = todo.pop()
        seen += 1
        if seen > budget:
            if strict:
                raise Unanalysable
            return
        yield node
        if skip and isinstance(node, skip):
            continue
        for field in node._fields:
            value = getattr(node, field, None)
            if isinstance(value, ast.AST):
                todo.append(value)
            elif isinstance(value, list):
                todo.extend(v for v in value if isinstance(v, ast.AST))


#: Context and operator singletons: never looked up in the index (read through their parents).
_LEAVES = (ast.expr_context, ast.operator, ast.cmpop, ast.unaryop, ast.boolop)


def index_nodes(root: Any, budget: int = NODE_BUDGET) -> dict[type, list[Any]]:
    """Every node under ``root`` grouped by type, in one iterative pass; :class:`Unanalysable` past ``budget``."""
    by_type: dict[type, list[Any]] = {}
    todo = [root] if isinstance(root, ast.AST) else []
    seen = 0
    node_type = ast.AST
    while todo:
        node = todo.pop()
        seen += 1
        if seen > budget:
            raise Unanalysable
        group = by_type.get(type(node))
        if group is None:
            by_type[type(node)] = [node]
        else:
            group.append(node)
        for field in node._fields:
            value = getattr(node, field, None)
            if isinstance(value, node_type):
                if not isinstance(value, _LEAVES):
                    todo.append(value)
            elif type(value) is list:
                todo.extend([v for v in value if isinstance(v, node_type) and not isinstance(v, _LEAVES)])
    return by_type


def call_name(node: ast.Call) -> str:
    """The called name: ``f`` for ``f(...)``, ``attr`` for ``x.attr(...)``, ``""`` otherwise."""
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


def string_literals(tree: ast.AST) -> list[str]:
    """Every string constant under ``tree`` (docstrings included); stops quietly past the node budget."""
    return [n.value for n in walk(tree, strict=False) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def module_signals(module: str) -> set[str]:
    """The signals importing ``module`` raises (:data:`MODULE_SIGNALS`, by module or package prefix)."""
    return {signal for prefix, signal in MODULE_SIGNALS.items() if module == prefix or module.startswith(prefix + ".")}


def str_constant(node: ast.AST | None) -> str | None:
    """The value of a string constant, else ``None``."""
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None
