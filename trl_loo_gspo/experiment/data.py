"""Datasets for the three tasks: the column contract, mappers from public raw formats, loading, validation splits.

TRL passes every dataset column to the reward functions as keyword arguments, so a dataset is usable for a task
when it has the columns that task's verifier reads (:data:`TASK_COLUMNS`). A *mapper* turns one raw row of a
public dataset into those columns, with an instruction prompt that asks for the format the verifier extracts.
See ``docs/data.md``.
"""

from __future__ import annotations

import ast
import importlib
import random
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import datasets

from ..records.registration import row_hashes, split_overlap
from ..verifiers.code.test_plan import program_names, undefined_name_rows, weakly_verified_rows
from ..verifiers.math import boxed_contents

#: Columns each task needs; ``"a|b"`` means at least one of ``a`` and ``b``. ``prompt`` is a string or a list of
#: chat messages. Optional: ``preamble`` (proofs).
TASK_COLUMNS: dict[str, tuple[str, ...]] = {
    "math": ("prompt", "answer"),
    "code": ("prompt", "tests|io_cases"),
    "proofs": ("prompt", "theorem"),
}

MATH_INSTRUCTION = "Solve the problem step by step, then put the final answer in \\boxed{}."
CODE_INSTRUCTION = "Write the solution as a complete Python program in a ```python block."
PROOF_INSTRUCTION = (
    "Write the proof in a ```coq block, starting with Proof. and ending with Qed. Use tactics only: do not change "
    "the statement, add axioms or Require anything, and do not use admit or Admitted."
)


def validate_columns(dataset: datasets.Dataset, task: str) -> None:
    """Raise ``ValueError`` naming the missing column(s), the task and the available columns."""
    if task not in TASK_COLUMNS:
        raise ValueError(f"unknown task {task!r}; known tasks: {sorted(TASK_COLUMNS)}")
    available = list(dataset.column_names)
    missing = [spec for spec in TASK_COLUMNS[task] if not any(c in available for c in spec.split("|"))]
    if missing:
        wanted = ", ".join(" or ".join(repr(c) for c in spec.split("|")) for spec in missing)
        raise ValueError(f"the {task!r} task needs column(s) {wanted}; the dataset has columns {available}")


# -- row mappers: raw row -> contract columns (prompt as plain instruction text) ---------------------------------


def last_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (nested braces balanced) or ``\\fbox{...}``; else ``\\boxed 5``'s
    token; ``None`` when there is none."""
    contents = boxed_contents(text.replace("\\fbox", "\\boxed"))
    if contents:
        return contents[-1]
    bare = re.findall(r"\\boxed\s+([^\s$]+)", text)
    return bare[-1] if bare else None


def map_gsm8k(row: dict[str, Any]) -> dict[str, Any]:
    """``openai/gsm8k``: ``question``, ``answer`` = reasoning + ``#### 1,234`` → answer ``"1234"``."""
    final = str(row["answer"]).rsplit("####", 1)[-1] if "####" in str(row["answer"]) else ""
    answer = final.strip().replace(",", "").replace("$", "").strip()
    return {"prompt": f"{row['question'].strip()}\n\n{MATH_INSTRUCTION}", "answer": answer or None}


def map_math(row: dict[str, Any]) -> dict[str, Any]:
    """``EleutherAI/hendrycks_math`` (MATH): ``problem``, ``solution``; the answer is the last boxed content."""
    return {"prompt": f"{row['problem'].strip()}\n\n{MATH_INSTRUCTION}", "answer": last_boxed(row["solution"])}


def map_math500(row: dict[str, Any]) -> dict[str, Any]:
    """``HuggingFaceH4/MATH-500``: ``problem``, ``answer``."""
    return {"prompt": f"{row['problem'].strip()}\n\n{MATH_INSTRUCTION}", "answer": str(row["answer"]).strip() or None}


def map_mbpp(row: dict[str, Any]) -> dict[str, Any]:
    """``google-research-datasets/mbpp`` (``full``: ``text``, ``test_list``, ``test_setup_code``,
    ``challenge_test_list``; ``sanitized``: ``prompt``, ``test_list``, ``test_imports``).

    The prompt shows the task and the first test (which names the function), as is standard for MBPP. The
    verifier has no setup column, so the setup code is prepended to every test (tests run in the program's
    namespace, so the program's functions see its names at call time); challenge tests are extra tests.
    """
    text = row.get("text") or row.get("prompt") or ""
    setup = row.get("test_setup_code") or "\n".join(row.get("test_imports") or [])
    asserts = [*(row.get("test_list") or []), *(row.get("challenge_test_list") or [])]
    tests = [f"{setup.strip()}\n{test}" if setup.strip() else test for test in asserts]
    first = (row.get("test_list") or [""])[0]
    prompt = f"{text.strip()}\nYour code should pass this test:\n{first}\n\n{CODE_INSTRUCTION}"
    # the reference solution (never in the prompt) says which names are the program's and which are classes
    return {"prompt": prompt, "tests": tests, "reference": str(row.get("code") or "")}


def map_humaneval(row: dict[str, Any]) -> dict[str, Any]:
    """``openai_humaneval``: ``prompt`` (signature + docstring), ``test`` (``def check(candidate): ...``),
    ``entry_point``. One multi-line test: the prompt's imports and helper functions (e.g. ``poly`` in problem 32,
    ``encode_cyclic`` in 38: the test calls them, and the dataset's own, not the program's, must answer), the test
    source, then ``check(<entry_point>)``."""
    prompt = (
        f"Complete the following Python function:\n```python\n{row['prompt'].rstrip()}\n```\n\n{CODE_INSTRUCTION} "
        "Include the imports and any helper functions from the code above."
    )
    helpers = _prompt_helpers(row["prompt"], row["entry_point"])
    test = f"{row['test'].rstrip()}\n\ncheck({row['entry_point']})\n"
    tests = [f"{helpers}\n\n{test}" if helpers else test]
    return {"prompt": prompt, "tests": tests, "entry_points": [row["entry_point"]]}


def _prompt_helpers(prompt: str, entry_point: str) -> str:
    """The imports and the top-level functions and classes of a HumanEval prompt other than the entry point."""
    try:
        tree = ast.parse(prompt)
    except (SyntaxError, ValueError):
        return ""
    keep = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)
    parts = [
        ast.get_source_segment(prompt, node) or ""
        for node in tree.body
        if isinstance(node, keep) and getattr(node, "name", None) != entry_point
    ]
    return "\n\n".join(p for p in parts if p)


def map_coq(row: dict[str, Any]) -> dict[str, Any]:
    """Our Coq JSONL (``theorem``, optional ``preamble``, ``name``, ``reference_proof``); the reference proof is
    dropped: it must never reach the model."""
    theorem, preamble = row["theorem"].strip(), (row.get("preamble") or "").strip()
    statement = f"{preamble}\n{theorem}" if preamble else theorem
    prompt = f"Prove the following Coq theorem.\n```coq\n{statement}\n```\n\n{PROOF_INSTRUCTION}"
    return {"prompt": prompt, "theorem": theorem, "preamble": preamble}


def map_identity(row: dict[str, Any]) -> dict[str, Any]:
    """Rows already in the contract: returned unchanged (every column kept)."""
    return dict(row)


MAPPERS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "gsm8k": map_gsm8k,
    "math": map_math,
    "math500": map_math500,
    "mbpp": map_mbpp,
    "humaneval": map_humaneval,
    "coq": map_coq,
    "identity": map_identity,
}

_SIGNATURES: dict[str, Callable[[set[str]], bool]] = {
    "gsm8k": lambda c: {"question", "answer"} <= c,
    "math": lambda c: {"problem", "solution"} <= c and "answer" not in c,
    "math500": lambda c: {"problem", "answer"} <= c,
    "mbpp": lambda c: {"code", "test_list"} <= c and bool({"text", "prompt"} & c),
    "humaneval": lambda c: {"prompt", "test", "entry_point"} <= c,
    "coq": lambda c: "theorem" in c and "prompt" not in c,
    "identity": lambda c: "prompt" in c and bool({"answer", "tests", "io_cases", "theorem"} & c),
}


def infer_mapper(column_names: list[str]) -> str:
    """The mapper whose raw format these columns match; ``ValueError`` when none or several match."""
    columns = set(column_names)
    matches = [name for name, matches in _SIGNATURES.items() if matches(columns)]
    if len(matches) != 1:
        why = "no known format matches" if not matches else f"ambiguous: {matches} all match"
        raise ValueError(
            f"cannot infer the mapper for columns {sorted(columns)} ({why}); pass mapper= one of {sorted(MAPPERS)} "
            "or a dotted import path to your own row function"
        )
    return matches[0]


def resolve_mapper(mapper: str | Callable, column_names: list[str]) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A mapper from a name in :data:`MAPPERS`, ``"auto"``, a dotted path (``pkg.module.func`` or
    ``pkg.module:func``) or a callable."""
    if callable(mapper):
        return mapper
    if mapper == "auto":
        mapper = infer_mapper(column_names)
    if mapper in MAPPERS:
        return MAPPERS[mapper]
    module, sep, attr = mapper.rpartition(":") if ":" in mapper else mapper.rpartition(".")
    if not sep or not module:
        raise ValueError(f"unknown mapper {mapper!r}; known: {sorted(MAPPERS)}, or a dotted path module.func")
    return getattr(importlib.import_module(module), attr)


def _has_value(value: Any) -> bool:
    return bool(value.strip()) if isinstance(value, str) else value is not None and value != []


def prepare_dataset(
    dataset: datasets.Dataset,
    task: str,
    mapper: str | Callable = "auto",
    system_prompt: str | None = None,
    conversational: bool = True,
    max_rows: int | None = None,
    seed: int | None = None,
) -> datasets.Dataset:
    """Map raw rows to the ``task``'s contract columns, format the prompt, keep ``max_rows`` rows, validate.

    Args:
        mapper: a name in :data:`MAPPERS`, ``"auto"`` (:func:`infer_mapper`), a dotted import path to a row
            function, or a callable. The raw columns are removed; the mapper's output columns are kept.
        system_prompt: a system message put before the user message (conversational prompts only).
        conversational: ``prompt`` as ``[{"role": "system", ...}, {"role": "user", "content": ...}]`` (TRL's
            conversational format); else the plain instruction text.
        max_rows: keep the first ``max_rows`` rows (after the shuffle when ``seed`` is given).
        seed: ``None`` keeps the dataset's order; an int shuffles with that seed first.

    Rows whose required columns came out empty (e.g. a MATH solution without ``\\boxed``) are dropped with a
    warning: the verifier could not score them. Code rows with a weakly verified test (one that hands the program a
    function or a file) are counted in a warning: by default their answers are unscorable. A code row whose
    ``entry_points`` or ``reference`` cannot be read (an empty list, a string that is no list of names, a reference
    that does not parse as Python 3) is refused (``ValueError`` naming the row and the column); the code rows that
    declare neither are counted in a warning that says what inferring their names costs.
    """
    if task not in TASK_COLUMNS:
        raise ValueError(f"unknown task {task!r}; known tasks: {sorted(TASK_COLUMNS)}")
    if system_prompt is not None and not conversational:
        raise ValueError("system_prompt needs conversational=True (a plain prompt has no system message)")
    function = resolve_mapper(mapper, list(dataset.column_names))

    def convert(row: dict[str, Any]) -> dict[str, Any]:
        out = function(row)
        prompt = out.get("prompt")
        if "prompt" not in out:
            return out
        if isinstance(prompt, list):
            if not conversational:
                raise ValueError("the prompt is already a chat (list of messages); use conversational=True")
            if system_prompt is not None and prompt[0].get("role") != "system":
                prompt = [{"role": "system", "content": system_prompt}, *prompt]
        elif conversational:
            system = [{"role": "system", "content": system_prompt}] if system_prompt is not None else []
            prompt = [*system, {"role": "user", "content": prompt}]
        return {**out, "prompt": prompt}

    mapped = dataset.map(convert, remove_columns=list(dataset.column_names), desc=f"mapping to the {task} contract")
    validate_columns(mapped, task)
    mapped = mapped.select_columns(["prompt", *(c for c in mapped.column_names if c != "prompt")])
    if task == "code":
        _refuse_unreadable_declarations(mapped)
    groups = [[c for c in spec.split("|") if c in mapped.column_names] for spec in TASK_COLUMNS[task]]
    keep = mapped.filter(lambda row: all(any(_has_value(row[c]) for c in group) for group in groups))
    if len(keep) < len(mapped):
        warnings.warn(f"dropped {len(mapped) - len(keep)} of {len(mapped)} rows with empty {groups}", stacklevel=2)
    if seed is not None:
        keep = keep.shuffle(seed=seed)
    if max_rows is not None:
        keep = keep.select(range(min(max_rows, len(keep))))
    if task == "code" and "tests" in keep.column_names:
        names = [c for c in ("entry_points", "reference") if c in keep.column_names]
        rows = [dict(zip(names, values, strict=True)) for values in zip(*(keep[c] for c in names), strict=True)]
        _report_weak_rows(keep["tests"], rows or None)
        _report_undeclared_rows(keep["tests"], rows or None)
    return keep


_DECLARATIONS = ("entry_points", "reference")


def _refuse_unreadable_declarations(mapped: datasets.Dataset) -> None:
    """``ValueError`` naming each code row (its index in the mapped dataset, the raw order) whose ``entry_points``
    or ``reference`` cannot be read: the verifier would score it ``None``, and falling back to inferring its names
    would reopen what the declaration closes (docs/rewards.md)."""
    names = [c for c in _DECLARATIONS if c in mapped.column_names]
    if not names or "tests" not in mapped.column_names:
        return
    bad: list[str] = []
    for index, (tests, *values) in enumerate(zip(mapped["tests"], *(mapped[c] for c in names), strict=True)):
        error = program_names(dict(zip(names, values, strict=True))).error if tests else None
        if error is not None:
            bad.append(f"row {index}, {error}")
    if bad:
        shown = "; ".join(bad[:5]) + (f"; and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise ValueError(
            f"{len(bad)} of {len(mapped)} code rows declare the program's names in a way that cannot be read: "
            f"{shown}. 'entry_points' is a name, a list of names, a JSON list ('[\"area\"]') or a comma string "
            "('area, perimeter'); 'reference' is Python 3 source defining the functions or classes; leave a value "
            "out (None) to have the names inferred (docs/data.md)"
        )


def _report_undeclared_rows(tests_column: list[list[str] | None], rows: list[dict[str, Any]] | None) -> None:
    """Warn, with a count, about the code rows that declare none of the program's names, and what it costs."""
    undeclared = [
        i
        for i, tests in enumerate(tests_column)
        if tests and (rows is None or program_names(rows[i]).entry_points is None)
    ]
    if undeclared:
        warnings.warn(
            f"{len(undeclared)} of {len(tests_column)} code rows declare no names of the program (no 'entry_points' "
            f"or 'reference'; first: row {undeclared[0]}): they are inferred from each test, so a helper the program "
            "defines and a test reads on its expected side cannot be told from an entry point (the program answers "
            "it), a test that uses a standard-library name it did not import makes its row unscorable, and no call "
            "may return an object. Declare 'entry_points' (or a 'reference') to close this (docs/rewards.md)",
            stacklevel=3,
        )


def _report_weak_rows(tests_column: list[list[str] | None], rows: list[dict[str, Any]] | None = None) -> None:
    """Warn about rows whose tests cannot be judged apart from the program (``CodeVerifier(weak_tests=...)``) and
    rows whose tests read a name the dataset does not define (unscorable, anomaly ``undefined_name``)."""
    undefined = undefined_name_rows(tests_column, rows)
    if undefined:
        row, why = next(iter(undefined.items()))
        warnings.warn(
            f"{len(undefined)} of {len(tests_column)} code rows have a test that {why}: CodeVerifier scores every "
            f"answer of those rows None (anomaly 'undefined_name'; first: row {row}). Import the name in the test, or "
            "declare the program's names in an 'entry_points' or 'reference' column (docs/rewards.md)",
            stacklevel=3,
        )
    weak = weakly_verified_rows(tests_column, rows)
    if weak:
        row, why = next(iter(weak.items()))
        warnings.warn(
            f"{len(weak)} of {len(tests_column)} code rows are weakly verified (a test {why}): CodeVerifier's default"
            " weak_tests='unscorable' scores every answer of those rows None, so they carry no training signal"
            f" (first: row {row})",
            stacklevel=3,
        )


# -- loading ---------------------------------------------------------------------------------------------------

_FILE_BUILDERS = {".json": "json", ".jsonl": "json", ".parquet": "parquet", ".csv": "csv"}


def load_task_dataset(
    name_or_path: str,
    split: str,
    task: str,
    mapper: str | Callable = "auto",
    config: str | None = None,
    revision: str | None = None,
    data_files: Any = None,
    **prepare_kwargs: Any,
) -> datasets.Dataset:
    """Load a split and :func:`prepare_dataset` it for ``task``.

    ``name_or_path``: a local ``.json``/``.jsonl``/``.parquet``/``.csv`` file, a directory written by
    ``save_to_disk`` (a ``DatasetDict``'s ``split`` is taken), or anything ``datasets.load_dataset`` accepts (a hub
    id with ``config``/``revision``, a builder name such as ``"json"`` with ``data_files``, a data directory).
    """
    path = Path(name_or_path)
    if path.is_dir() and ((path / "state.json").exists() or (path / "dataset_dict.json").exists()):
        loaded = datasets.load_from_disk(str(path))
        raw = loaded[split] if isinstance(loaded, datasets.DatasetDict) else loaded
    elif path.suffix.lower() in _FILE_BUILDERS and data_files is None:
        if not path.is_file():
            raise FileNotFoundError(f"no such data file: {path}")
        raw = datasets.load_dataset(_FILE_BUILDERS[path.suffix.lower()], data_files={split: str(path)}, split=split)
    else:
        raw = datasets.load_dataset(name_or_path, config, split=split, revision=revision, data_files=data_files)
    return prepare_dataset(raw, task, mapper=mapper, **prepare_kwargs)


# -- validation split ------------------------------------------------------------------------------------------


def split_validation(
    dataset: datasets.Dataset, validation_size: int | float, seed: int = 0
) -> tuple[datasets.Dataset, datasets.Dataset]:
    """Hold out ``validation_size`` rows (an int, or a fraction in (0, 1)) so that no prompt is in both splits.

    Rows with identical prompts form one group and go to the same side; groups are drawn in a seeded order and a
    group is taken only if it fits, so the validation split has exactly the asked size unless the duplicate groups
    make that impossible (then it is smaller, with a warning). Both splits keep the dataset's row order.
    """
    total = len(dataset)
    target = round(validation_size * total) if isinstance(validation_size, float) else int(validation_size)
    if isinstance(validation_size, float) and not 0 < validation_size < 1:
        raise ValueError(f"a fractional validation_size must be in (0, 1), not {validation_size}")
    if not 0 < target < total:
        raise ValueError(f"validation_size={validation_size} gives {target} of {total} rows; need 0 < size < rows")
    groups: dict[str, list[int]] = {}
    for index, digest in enumerate(row_hashes(dataset, "prompt")):
        groups.setdefault(digest, []).append(index)
    order = list(groups.values())
    random.Random(seed).shuffle(order)
    held: list[int] = []
    for members in order:
        if len(held) + len(members) <= target:
            held += members
        if len(held) == target:
            break
    if len(held) < target:
        warnings.warn(f"validation split has {len(held)} rows, not {target}: duplicate prompts", stacklevel=2)
    if not held or len(held) == total:
        raise ValueError("cannot split: every prompt group is larger than the validation size or the dataset")
    chosen = set(held)
    train = dataset.select([i for i in range(total) if i not in chosen])
    validation = dataset.select(sorted(held))
    assert not split_overlap(train, validation), "a prompt is in both splits"
    return train, validation
