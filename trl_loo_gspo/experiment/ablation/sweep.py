"""Each variant's learning rate, and its clip parameter, chosen on a tuning split before the study (no model here;
:mod:`.runner` trains).

A plan with a ``sweep`` section::

    sweep:
      learning_rates: [5.0e-5, 1.0e-4, 2.0e-4]   # every swept variant (baseline included) is tried at each
      seeds: [100, 101, 102]                     # disjoint from the study's seeds
      rollout_tokens: 200000                     # default: the plan's budget
      eval_every_tokens: 200000                  # default: the plan's (the final-rate metric needs only the end)
      metric: final_pass_at_1                    # final_pass_rate, auc, final_pass_at_1 or greedy_auc
      grids:                                     # optional: a variant's own parameter axis, crossed with the rates
        gspo: {epsilon: [3.0e-4, 3.0e-3, 3.0e-2], epsilon_high: [4.0e-4, 4.0e-3, 4.0e-2]}   # fields move together
        grpo: {epsilon: [0.1, 0.2, 0.3]}

trains every (variant, learning rate, grid value, sweep seed) to the sweep budget and scores it on the task's
*tuning* split (neither the training nor the validation split: ``task_options.tuning_pairs`` of ``demo-addition``,
``tuning_per_terms`` of ``demo-mixed``). A grid's fields are one axis: their lists have one length and the i-th values
are set together (e.g. ε and ε_high at a fixed ratio). Each variant's cell — learning rate and grid value — is the
one with the best mean score over the sweep seeds (ties: the better mean curve area of the same kind, greedy or
sampled, then the smaller rate, then the earlier grid value); the study's runs then train at it and are scored on
the validation split. Every variant gets the same rates, seeds and budget; the report states each variant's number
of cells where the grids differ in length, the margin of each choice over the runner-up, and every choice at the
edge of its grid.

A single-field ablation (a variant with ``base``) is not swept over the learning rates: it trains at its root
variant's choice, so that it differs from its base in exactly the fields it names (fields it sets itself keep its
own values). With a grid of its own (e.g. a token-level ratio needs its own ε), it is swept over that grid alone, at
the root's learning rate, after the root's choice is made: a second tuning phase.
"""

from __future__ import annotations

import math
from typing import Any

SWEEP_KEYS = ("learning_rates", "seeds", "rollout_tokens", "metric", "eval_every_tokens", "grids", "require_interior")
#: metric -> the record key it reads and the curve area that breaks its ties (the same kind: sampled or greedy)
METRICS = {
    "final_pass_rate": "auc",
    "auc": "final_pass_rate",
    "final_pass_at_1": "greedy_auc",
    "greedy_auc": "final_pass_at_1",
}
#: how the report names each metric
METRIC_NAMES = {
    "final_pass_rate": "final pass rate",
    "auc": "curve area",
    "final_pass_at_1": "final greedy pass@1",
    "greedy_auc": "greedy curve area",
}


def sweep_problems(plan: Any, task: Any = None) -> list[str]:
    """What is wrong with the plan's ``sweep`` section (empty when it is usable); ``task``: the plan's built-in task
    (``None`` for a recipe), whose tuning split the sweep scores on."""
    sweep = plan.sweep
    allowed = ", ".join(SWEEP_KEYS)
    problems = [f"sweep: unknown key {key!r} (allowed: {allowed})" for key in sweep if key not in SWEEP_KEYS]
    rates = sweep.get("learning_rates")
    if not (isinstance(rates, list) and len(rates) >= 2 and all(_positive(r) for r in rates)):
        problems.append(f"sweep.learning_rates: a list of at least 2 positive numbers, got {rates!r}")
    elif len(set(rates)) != len(rates):
        problems.append(f"sweep.learning_rates: repeated values in {rates}")
    seeds = sweep.get("seeds")
    if not (isinstance(seeds, list) and seeds and all(isinstance(s, int) for s in seeds)):
        problems.append(f"sweep.seeds: a non-empty list of integers, got {seeds!r}")
    elif set(seeds) & set(plan.seeds):
        problems.append(
            f"sweep.seeds {sorted(set(seeds) & set(plan.seeds))} are also study seeds: a run picked for its tuning "
            "score would then be part of the evidence; use other seeds"
        )
    tokens = sweep.get("rollout_tokens", plan.rollout_tokens)
    if not (isinstance(tokens, int) and tokens > 0):
        problems.append(f"sweep.rollout_tokens: a positive integer, got {tokens!r}")
    every = sweep.get("eval_every_tokens", plan.eval_every_tokens)
    if not (isinstance(every, int) and every > 0):
        problems.append(f"sweep.eval_every_tokens: a positive integer, got {every!r}")
    if sweep.get("metric", "final_pass_rate") not in METRICS:
        problems.append(f"sweep.metric: one of {tuple(METRICS)}, got {sweep.get('metric')!r}")
    problems += _grid_problems(plan, sweep.get("grids", {}))
    if not isinstance(sweep.get("require_interior", False), bool):
        problems.append(f"sweep.require_interior: true or false, got {sweep.get('require_interior')!r}")
    if plan.task == "recipe":
        problems.append("sweep: only for the built-in tasks (a recipe's validation split is its only held-out split)")
    elif not getattr(task, "has_tuning_split", False):
        problems.append(
            "sweep: the task holds out no tuning split; set task_options.tuning_pairs (demo-addition) or "
            "task_options.tuning_per_terms (demo-mixed) > 0"
        )
    fixed = [("common", plan.common), ("baseline", plan.baseline.get("config") or {})]
    fixed += [(f"variant {v.get('name')!r}", v.get("config") or {}) for v in plan.variants]
    if plan.common_rate is not None and not _positive(plan.common_rate):
        problems.append(f"common_rate: a positive learning rate, got {plan.common_rate!r}")
    problems += [f"{where}: sets learning_rate, which the sweep chooses" for where, c in fixed if "learning_rate" in c]
    return problems


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


def _grid_problems(plan: Any, grids: Any) -> list[str]:
    """What is wrong with ``sweep.grids`` (each a variant's axis: field -> values, one length, set together)."""
    if not isinstance(grids, dict):
        return [f"sweep.grids: a mapping of run name -> {{field: [values]}}, got {grids!r}"]
    names = [name for name, _, _ in plan.entries()]
    problems = []
    for name, grid in grids.items():
        where = f"sweep.grids.{name}"
        if name not in names:
            problems.append(f"{where}: no run named {name!r} (runs: {', '.join(names)})")
            continue
        if not (isinstance(grid, dict) and grid and all(isinstance(v, list) for v in grid.values())):
            problems.append(f"{where}: a mapping of config field -> list of values, got {grid!r}")
            continue
        if "learning_rate" in grid:
            problems.append(f"{where}: learning_rate is swept by sweep.learning_rates, not by a grid")
        lengths = {field: len(values) for field, values in grid.items()}
        if len(set(lengths.values())) != 1:
            problems.append(f"{where}: its fields move together, so their lists need one length, got {lengths}")
        elif min(lengths.values()) < 2:
            problems.append(f"{where}: at least 2 values (a grid of one value chooses nothing), got {grid}")
        elif len({tuple(map(str, cell.values())) for cell in _zipped(grid)}) != min(lengths.values()):
            problems.append(f"{where}: repeated values in {grid}")
    return problems


def _zipped(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    fields = list(grid)
    return [dict(zip(fields, values, strict=True)) for values in zip(*grid.values(), strict=True)]


def sweep_budget(plan: Any) -> int:
    """Generated tokens per sweep run."""
    return int(plan.sweep.get("rollout_tokens", plan.rollout_tokens))


def eval_every(plan: Any, split: str) -> int:
    """Generated tokens between evaluations of a run scored on ``split`` (a sweep's own spacing on the tuning
    split)."""
    return (
        int(plan.sweep.get("eval_every_tokens", plan.eval_every_tokens))
        if split == "tuning"
        else plan.eval_every_tokens
    )


def grid_cells(plan: Any, name: str) -> list[dict[str, Any]]:
    """The values of ``name``'s own grid, one mapping per cell in grid order (``[{}]`` without a grid)."""
    grid = (plan.sweep.get("grids") or {}).get(name)
    return _zipped(grid) if grid else [{}]


def cell_fields(plan: Any, name: str) -> list[str]:
    """The fields a sweep run of ``name`` varies: the learning rate and its grid's fields; an ablation's grid
    fields only (it takes its root's rate); none for an ablation without a grid."""
    grid = list((plan.sweep.get("grids") or {}).get(name) or {})
    return grid if name in plan.bases() else ["learning_rate", *grid]


def sweep_cell(plan: Any, name: str, overrides: dict[str, Any]) -> dict[str, Any]:
    """The cell a sweep run with these ``overrides`` trains in (:func:`cell_fields`)."""
    return {field: overrides[field] for field in cell_fields(plan, name) if field in overrides}


def cell_label(cell: dict[str, Any]) -> str:
    """A folder name for a sweep cell: ``lr0.0001`` for a learning rate alone (the layout before grids),
    ``lr0.0001-epsilon0.003-epsilon_high0.004`` with grid values."""
    short = {"learning_rate": "lr"}
    return "-".join(f"{short.get(field, field)}{_value(value)}" for field, value in cell.items())


def _value(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def sweep_runs(plan: Any) -> list[tuple[str, dict[str, Any], bool, int, dict[str, Any]]]:
    """(name, config overrides with the cell's values, is_baseline, seed, cell) of every run of the first tuning
    phase: every variant without a ``base``, at every learning rate and grid value."""
    ablations = plan.bases()
    return [
        (name, {**cfg, "learning_rate": lr, **cell}, base, seed, {"learning_rate": lr, **cell})
        for seed in plan.sweep["seeds"]
        for lr in plan.sweep["learning_rates"]
        for name, cfg, base in plan.entries()
        if name not in ablations
        for cell in grid_cells(plan, name)
    ]


def grid_runs(
    plan: Any, chosen: dict[str, dict[str, Any]]
) -> list[tuple[str, dict[str, Any], bool, int, dict[str, Any]]]:
    """The second tuning phase, given the first phase's ``chosen``: every ablation with a grid of its own, at its
    root's choice (:func:`inherited`) and each of its grid's values."""
    grids = plan.sweep.get("grids") or {}
    return [
        (name, {**cfg, **inherited(plan, name, chosen), **cell}, base, seed, cell)
        for seed in plan.sweep["seeds"]
        for name, cfg, base in plan.entries()
        if name in plan.bases() and name in grids
        for cell in grid_cells(plan, name)
    ]


def own_fields(plan: Any, name: str) -> set[str]:
    """The fields an ablation sets between its root and itself (its own and its intermediate bases')."""
    variants = {v["name"]: v for v in plan.variants}
    fields: set[str] = set()
    while name in plan.bases():
        fields |= set(variants[name].get("config") or {})
        name = variants[name]["base"]
    return fields


def inherited(plan: Any, name: str, chosen: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What an ablation takes from its root's choice: every chosen field it does not set itself."""
    own = own_fields(plan, name)
    return {field: value for field, value in chosen[plan.bases()[name]].items() if field not in own}


def cell_of(record: dict[str, Any]) -> dict[str, Any]:
    """A sweep record's cell (a record written before grids holds its learning rate only)."""
    return dict(record.get("sweep_cell") or {"learning_rate": record["learning_rate"]})


def _key(cell: dict[str, Any]) -> tuple:
    return tuple((field, _value(value)) for field, value in cell.items())


def sweep_table(records: list[dict[str, Any]]) -> dict[str, dict[tuple, list[dict[str, Any]]]]:
    """Sweep records by variant, then cell (a tuple of (field, value) pairs, the cell's order)."""
    table: dict[str, dict[tuple, list[dict[str, Any]]]] = {}
    for r in records:
        table.setdefault(r["name"], {}).setdefault(_key(cell_of(r)), []).append(r)
    return table


def ranked_cells(plan: Any, name: str, by_cell: dict[tuple, list[dict[str, Any]]]) -> list[tuple]:
    """``name``'s cells, best first: mean score over the sweep seeds, then the mean curve area of the same kind,
    then the smaller learning rate, then the earlier grid value."""
    metric = plan.sweep.get("metric", "final_pass_rate")
    order = {_key(cell): i for i, cell in enumerate(grid_cells(plan, name))}

    def rank(key: tuple) -> tuple:
        cell = cell_of(by_cell[key][0])
        grid = _key({field: value for field, value in cell.items() if field != "learning_rate"})
        scores = (-_mean(by_cell[key], metric), -_mean(by_cell[key], METRICS[metric]))
        return (*scores, float(cell.get("learning_rate", 0.0)), order.get(grid, len(order)))

    return sorted(by_cell, key=rank)


def choose(plan: Any, records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Each variant's chosen settings (``{"learning_rate": ..., grid fields...}``): the best cell of its sweep
    runs (:func:`ranked_cells`); an ablation takes its root's (:func:`inherited`), with the best value of its own
    grid when its second-phase runs are in ``records``."""
    table = sweep_table(records)
    ablations = plan.bases()
    chosen: dict[str, dict[str, Any]] = {}
    for name, by_cell in table.items():
        if name not in ablations:
            best = ranked_cells(plan, name, by_cell)[0]
            chosen[name] = cell_of(by_cell[best][0])
    for name, root in ablations.items():
        if root not in chosen:
            continue
        chosen[name] = inherited(plan, name, chosen)
        if name in table:
            chosen[name].update(cell_of(table[name][ranked_cells(plan, name, table[name])[0]][0]))
    return chosen


def _mean(records: list[dict[str, Any]], key: str) -> float:
    values = [r[key] for r in records if isinstance(r.get(key), (int, float)) and not math.isnan(r[key])]
    return sum(values) / len(values) if values else -math.inf


def with_choices(
    runs: list[tuple[str, dict[str, Any], bool, int]], chosen: dict[str, dict[str, Any]]
) -> list[tuple[str, dict[str, Any], bool, int]]:
    """The study's runs, each at its variant's chosen settings."""
    return [(name, {**cfg, **chosen[name]}, base, seed) for name, cfg, base, seed in runs]


def sweep_section(plan: Any, records: list[dict[str, Any]]) -> list[str]:
    """The report's account of the sweep: the tuning score of every (variant, cell), each variant's choice with its
    margin over the runner-up, the cells and budget every variant got, and every choice at the edge of its grid."""
    if not plan.sweep or not records:
        return []
    metric = plan.sweep.get("metric", "final_pass_rate")
    rates = sorted(float(r) for r in plan.sweep["learning_rates"])
    grids = plan.sweep.get("grids") or {}
    table = sweep_table(records)
    chosen = choose(plan, records)
    seeds = plan.sweep["seeds"]
    ablations = plan.bases()
    roots = [name for name in table if name not in ablations]
    cells = {name: len(rates) * len(grid_cells(plan, name)) for name in roots}
    budget = sweep_budget(plan)
    what = "learning rate and clip parameter" if grids else "learning rate"
    lines = [
        "",
        f"## {what[0].upper() + what[1:]} per variant (sweep on the tuning split)",
        "",
        f"Every variant was trained at each of {len(rates)} learning rates"
        + (" (crossed with its own grid where it has one)" if grids else "")
        + f" with {len(seeds)} sweep seed(s) ({', '.join(map(str, seeds))}; not study seeds) for {budget:,} generated "
        "tokens each — the same sweep budget for every variant: "
        + _budget_phrase(cells, len(seeds) * budget)
        + f" — and scored by its {METRIC_NAMES[metric]} on the tuning split (problems in neither the training "
        f"nor the validation split). The study ran each variant at its best {what} (ties: the better curve area, "
        "then the smaller rate). Mean over the sweep seeds:",
    ]
    plain = [name for name in roots if name not in grids]
    if plain:
        lines += ["", "| variant | " + " | ".join(f"lr {lr:g}" for lr in rates) + " | chosen |"]
        lines.append("|---|" + "---|" * (len(rates) + 1))
        for name in plain:
            by_cell = table[name]
            row = [_cell_mean(by_cell, {"learning_rate": lr}, metric) for lr in rates]
            lines.append(f"| {name} | " + " | ".join(row) + f" | {chosen[name]['learning_rate']:g} |")
    for name in [n for n in table if n in grids]:
        lines += _grid_table(plan, name, table[name], rates if name in roots else None, chosen, metric)
    lines += _choice_table(plan, table, chosen, metric, rates)
    plain_ablations = {n: r for n, r in ablations.items() if n not in grids}
    if plain_ablations:
        inherited_text = ", ".join(
            f"{name} ({root}'s {_settings(chosen.get(root, {}))})" for name, root in plain_ablations.items()
        )
        lines += [
            "",
            f"Single-field ablations are not swept: each trains at the {what} its root chose, so that it differs "
            f"from its base in exactly the fields it names: {inherited_text}.",
        ]
    edge = edge_choices(plan, records)
    if edge:
        lines += [
            "",
            f"At the edge of the grid, better than the next value inside it: {', '.join(edge)} (a better setting "
            "may lie outside it).",
        ]
    return lines


def _budget_phrase(cells: dict[str, int], per_cell: int) -> str:
    counts = sorted(set(cells.values()))
    if len(counts) == 1:
        return f"{counts[0] * per_cell:,} generated tokens"
    listed = ", ".join(f"{name} {n} cells ({n * per_cell:,} tokens)" for name, n in cells.items())
    return f"except where the grids differ in length: {listed}"


def _settings(cell: dict[str, Any]) -> str:
    return ", ".join(f"{'lr' if field == 'learning_rate' else field} {_value(value)}" for field, value in cell.items())


def _cell_mean(by_cell: dict[tuple, list[dict[str, Any]]], cell: dict[str, Any], metric: str) -> str:
    runs = by_cell.get(_key(cell))
    return f"{_mean(runs, metric):.3f}" if runs else "—"


def _grid_table(
    plan: Any, name: str, by_cell: dict, rates: list[float] | None, chosen: dict, metric: str
) -> list[str]:
    """A variant's scores by grid value (rows) and learning rate (columns; one column, its root's rate, for an
    ablation's own grid)."""
    fields = list((plan.sweep.get("grids") or {})[name])
    if rates is None:
        root = plan.bases()[name]
        title = f"### {name}: its own {', '.join(fields)}, at {root}'s choice"
        columns: list[dict[str, Any]] = [{}]
    else:
        title = f"### {name}: learning rate × {', '.join(fields)}"
        columns = [{"learning_rate": lr} for lr in rates]
    header = " | ".join(f"lr {c['learning_rate']:g}" if c else "score" for c in columns)
    lines = ["", title, "", f"| {', '.join(fields)} | {header} |", "|---|" + "---|" * len(columns)]
    for cell in grid_cells(plan, name):
        values = [_cell_mean(by_cell, {**column, **cell}, metric) for column in columns]
        lines.append(f"| {', '.join(_value(v) for v in cell.values())} | " + " | ".join(values) + " |")
    lines += ["", f"Chosen: {_settings({f: chosen[name][f] for f in cell_fields(plan, name)})}."]
    return lines


def _choice_table(plan: Any, table: dict, chosen: dict, metric: str, rates: list[float]) -> list[str]:
    """Each swept variant's choice, its score, the runner-up and the margin, per seed too."""
    lines = [
        "",
        "| variant | cells | chosen | score | runner-up | margin | seeds where the choice beats the runner-up |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, by_cell in table.items():
        ranked = ranked_cells(plan, name, by_cell)
        best = by_cell[ranked[0]]
        mine = f"{_mean(best, metric):.3f}"
        shown = _settings({f: chosen[name][f] for f in cell_fields(plan, name)})
        if len(ranked) < 2:
            lines.append(f"| {name} | {len(ranked)} | {shown} | {mine} | — | — | — |")
            continue
        second = by_cell[ranked[1]]
        margin = _mean(best, metric) - _mean(second, metric)
        by_seed = {r["seed"]: r[metric] for r in second}
        wins = [r[metric] > by_seed[r["seed"]] for r in best if r["seed"] in by_seed]
        lines.append(
            f"| {name} | {len(ranked)} | {shown} | {mine} | {_settings(cell_of(second[0]))} "
            f"({_mean(second, metric):.3f}) | {margin:+.3f} | {sum(wins)} of {len(wins)} |"
        )
    return lines


def edge_choices(plan: Any, records: list[dict[str, Any]]) -> list[str]:
    """Each swept variant whose choice sits at an end of one of its axes (the rates; its grid) and scores better
    than the next value inside it along that axis, the rest of its cell unchanged: the optimum may lie past the end.
    A choice tied with (or below) that neighbour is not listed: the axis does not point outwards there (e.g. a guard
    bound that never fires). One entry per variant: ``name (lr 0.0001: 0.612 vs 0.598 at lr 5e-05)``."""
    metric = plan.sweep.get("metric", "final_pass_rate")
    rates = sorted(float(r) for r in plan.sweep["learning_rates"])
    table, chosen = sweep_table(records), choose(plan, records)
    edges = []
    for name, by_cell in table.items():
        cell = {f: chosen[name][f] for f in cell_fields(plan, name)}
        axes: list[tuple[str, list[dict[str, Any]]]] = []
        if "learning_rate" in cell:
            axes.append(("lr", [{"learning_rate": lr} for lr in rates]))
        if len(cell) > ("learning_rate" in cell):
            axes.append(("grid", grid_cells(plan, name)))
        found = []
        for axis, values in axes:
            keys = [_key(v) for v in values]
            mine = _key({f: v for f, v in cell.items() if (f == "learning_rate") == (axis == "lr")})
            if len(values) < 2 or mine not in (keys[0], keys[-1]):
                continue
            inner = values[1] if mine == keys[0] else values[-2]
            neighbour = {**cell, **inner}
            here, there = _mean(by_cell.get(_key(cell), []), metric), _mean(by_cell.get(_key(neighbour), []), metric)
            if here > there:
                shown = {f: v for f, v in cell.items() if f in inner}
                found.append(f"{_settings(shown)}: {here:.3f} vs {there:.3f} at {_settings(inner)}")
        if found:
            edges.append(f"{name} ({'; '.join(found)})")
    return edges


class SweepEdgeError(ValueError):
    """A choice sits at the edge of its sweep grid and the plan asks for interior choices (``require_interior``)."""


def check_interior(plan: Any, records: list[dict[str, Any]]) -> None:
    """With ``sweep.require_interior``, raise :class:`SweepEdgeError` listing every choice at an edge
    (:func:`edge_choices`) before anything trains at it."""
    if not plan.sweep.get("require_interior"):
        return
    edges = edge_choices(plan, records)
    if edges:
        listed = "\n".join(f"  - {edge}" for edge in edges)
        raise SweepEdgeError(
            f"{len(edges)} sweep choice(s) at the edge of their grid, better than the next value inside it "
            f"(sweep.require_interior):\n{listed}\nExtend each past its edge (sweep.learning_rates, "
            "sweep.grids.<variant>) and run the plan again: every finished sweep run is kept, only the new cells "
            "train, and nothing trains at a choice the sweep has not bracketed."
        )
