"""The declared secondary metrics of an ablation report (issue #47), from run records alone: per variant, and for the
primary contrast and every contrast of both families, with the statistics of the primary metric (paired difference
and its 95% t interval, paired t and exact sign-flip p, Holm within each family for each metric).

The secondaries, each where the records keep it (records made before #47 keep only the final greedy pass@1):

* the pass@1 the plan did not declare primary: sampled pass rate (``final_pass_rate``, ``start_pass_rate``) under a
  greedy primary, greedy pass@1 (``final_pass_at_1``, ``start_pass_at_1``) under a sampled one;
* unbiased pass@k for k in :data:`PASS_KS` (k ≤ the answers drawn per problem) from the per-problem success counts
  (``per_problem``; the record's ``pass_at_k`` where it has no counts);
* the policy's mean per-token entropy over its sampled validation answers (``eval_entropy``);
* greedy and sampled pass rate by stratum (``by_stratum``: the number of terms on ``demo-mixed``).

Each has a value at the end of training and one at the warm start (evaluation at 0 tokens, the same for every
variant of a seed): the no-training reference row, :data:`WARM_START`.

Like :mod:`.report` it trains nothing and changes no record, so :mod:`.provenance` leaves it out of the source hash.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from . import exact
from .plan import AblationPlan
from .stats import mean_pass_at_k

#: The label of the no-training reference row (the warm start's values) in the report's tables.
WARM_START = "warm start (no training)"
#: The k of the secondary pass@k.
PASS_KS = (1, 4, 16)
PHASES = ("start", "final")
ALPHA = 0.05


@dataclass(frozen=True)
class Secondary:
    """One secondary metric: its label in the report and how to read it from a record at a phase."""

    label: str
    read: Callable[[dict, str], float | None]  # (record, "start" | "final") -> the value, or None where not kept


def _value(value: object) -> float | None:
    """``value`` as a float when it is a finite number, else ``None`` (absent, ``None``, NaN, a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _phase(record: dict, key: str, phase: str) -> object:
    """``record[key][phase]`` where the field is a mapping, else ``None``."""
    field = record.get(key)
    return field.get(phase) if isinstance(field, dict) else None


def read_field(start_key: str, final_key: str, record: dict, phase: str) -> float | None:
    """A top-level field: ``start_key`` at the warm start, ``final_key`` at the end."""
    return _value(record.get(start_key if phase == "start" else final_key))


def read_pass_at_k(k: int, record: dict, phase: str) -> float | None:
    """Unbiased pass@k from the per-problem success counts of ``phase`` (:func:`.stats.mean_pass_at_k`); from the
    record's ``pass_at_k`` where it keeps no counts; ``None`` where k exceeds the answers drawn per problem."""
    problems = record.get("per_problem")
    if isinstance(problems, dict):
        n, at = problems.get("samples"), problems.get(phase)
        counts = at.get("successes") if isinstance(at, dict) else None
        if isinstance(n, int) and counts:
            return mean_pass_at_k(list(counts), n, k) if 1 <= k <= n else None
    kept = _phase(record, "pass_at_k", phase)
    return _value(kept.get(str(k))) if isinstance(kept, dict) else None


def read_entropy(record: dict, phase: str) -> float | None:
    """The policy's mean per-token entropy (nats) over its sampled validation answers at ``phase``."""
    return _value(_phase(record, "eval_entropy", phase))


def read_stratum(stratum: str, kind: str, record: dict, phase: str) -> float | None:
    """The ``kind`` ("greedy" or "sampled") pass rate of one stratum at ``phase``."""
    strata = _phase(record, "by_stratum", phase)
    figures = strata.get(stratum) if isinstance(strata, dict) else None
    return _value(figures.get(kind)) if isinstance(figures, dict) else None


def _stratum_order(label: str) -> tuple[int, float, str]:
    return (0, float(label), label) if label.lstrip("-").isdigit() else (1, 0.0, label)


def secondaries(records: list[dict], primary_metric: str = "sampled") -> list[Secondary]:
    """The secondary metrics that at least one of ``records`` keeps (at the start or the end), in the report's order:
    the pass@1 that is not primary, pass@k, entropy, then each stratum (numeric labels in numeric order) greedy and
    sampled."""
    candidates = [
        Secondary("sampled pass@1", partial(read_field, "start_pass_rate", "final_pass_rate"))
        if primary_metric == "greedy"
        else Secondary("greedy pass@1", partial(read_field, "start_pass_at_1", "final_pass_at_1")),
        # (pass@1 from the counts is the sampled pass rate itself: listed once, as sampled pass@1 or the primary)
        *(Secondary(f"pass@{k}", partial(read_pass_at_k, k)) for k in PASS_KS if k > 1),
        Secondary("entropy (nats/token)", read_entropy),
    ]
    strata = {
        str(label)
        for r in records
        for phase in PHASES
        if isinstance(_phase(r, "by_stratum", phase), dict)
        for label in _phase(r, "by_stratum", phase)
    }
    for stratum in sorted(strata, key=_stratum_order):
        candidates += [
            Secondary(f"greedy, stratum {stratum}", partial(read_stratum, stratum, "greedy")),
            Secondary(f"sampled, stratum {stratum}", partial(read_stratum, stratum, "sampled")),
        ]
    return [m for m in candidates if any(m.read(r, phase) is not None for r in records for phase in PHASES)]


def final_values(runs: dict[int, dict], metric: Secondary) -> dict[int, float]:
    """``metric`` at the end of each seed's run (seeds whose record lacks it are left out)."""
    values = {seed: metric.read(r, "final") for seed, r in runs.items()}
    return {seed: v for seed, v in values.items() if v is not None}


def warm_start_values(by_name: dict[str, dict[int, dict]], metric: Secondary) -> dict[int, float]:
    """``metric`` at the warm start by seed: the first record of each seed that keeps it (every run of a seed starts
    from the same policy and is evaluated before its first step)."""
    values: dict[int, float] = {}
    for runs in by_name.values():
        for seed, r in runs.items():
            value = metric.read(r, "start")
            if seed not in values and value is not None:
                values[seed] = value
    return values


@dataclass(frozen=True)
class SecondaryContrast:
    """One contrast a − b on one secondary metric: the paired test and, in a family, Holm's adjusted p-values."""

    name: str
    family: str  # "primary" (tested alone), or the family's name
    test: exact.ContrastTest
    t_holm: float = math.nan  # NaN for the primary contrast and for a contrast with fewer than 2 pairs
    sign_flip_holm: float = math.nan


def contrast_tests(
    by_name: dict[str, dict[int, dict]],
    metric: Secondary,
    primary: list[str] | None,
    families: list[tuple[str, list[list[str]]]],
) -> list[SecondaryContrast]:
    """The paired tests of ``metric`` for the ``primary`` contrast (alone) and each family's contrasts, with Holm's
    correction within each family over its contrasts that have 2 or more paired seeds (on the paired t and on the
    exact sign-flip p-values separately)."""

    def test(a: str, b: str) -> exact.ContrastTest:
        fa, fb = final_values(by_name.get(a, {}), metric), final_values(by_name.get(b, {}), metric)
        return exact.test_contrast(f"{a} − {b}", [fa[s] - fb[s] for s in sorted(set(fa) & set(fb))])

    out = [SecondaryContrast(f"{primary[0]} − {primary[1]}", "primary", test(*primary))] if primary else []
    for family, pairs in families:
        tests = [test(a, b) for a, b in pairs]
        usable = [t for t in tests if t.n >= 2]
        adjusted = {row["name"]: row for row in exact.holm_family(usable, ALPHA)}
        for t in tests:
            row = adjusted.get(t.name) if t.n >= 2 else None
            holm = (row["t_holm"], row["sign_flip_holm"]) if row else (math.nan, math.nan)
            out.append(SecondaryContrast(t.name, family, t, *holm))
    return out


def _mean(values: dict[int, float]) -> str:
    return f"{sum(values.values()) / len(values):.3f}" if values else "—"


def _p(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:.4f}" if value < 0.01 else f"{value:.3f}"


def secondaries_section(plan: AblationPlan, by_name: dict[str, dict[int, dict]]) -> list[str]:
    """The secondaries in the report: a table of every variant's mean (over seeds) of each, under the warm start's
    (:data:`WARM_START`); then, per metric, the primary contrast and both families' contrasts. Empty when the records
    keep none."""
    records = [r for runs in by_name.values() for r in runs.values()]
    metrics = secondaries(records, plan.primary_metric)
    if not metrics:
        return []
    start = [warm_start_values(by_name, m) for m in metrics]
    greedy = plan.primary_metric == "greedy"
    other = "sampled pass@1 (answers sampled at the evaluation temperature)" if greedy else "greedy pass@1"
    lines = [
        "",
        "## Secondary metrics (declared; means over seeds)",
        "",
        "Validation figures at the end of training beside the primary metric, each where the records keep it: "
        f"{other}; unbiased pass@k from the per-problem counts of right answers among the n sampled "
        "(1 − C(n−c, k) / C(n, k) averaged over problems, 1 < k ≤ n; pass@1 from the counts is the sampled pass "
        "rate itself); the policy's mean per-token entropy over its "
        "sampled answers; greedy and sampled pass rate by stratum (the number of terms on demo-mixed); '—': no run "
        "of the row kept it."
        + (
            f" {WARM_START}: the policy every run starts from, evaluated before its first step (mean over seeds)."
            if any(start)
            else ""
        ),
        "",
        "| variant | " + " | ".join(m.label for m in metrics) + " |",
        "|---|" + "---|" * len(metrics),
    ]
    if any(start):
        lines.append(f"| {WARM_START} | " + " | ".join(_mean(values) for values in start) + " |")
    for name, runs in by_name.items():
        lines.append(f"| {name} | " + " | ".join(_mean(final_values(runs, m)) for m in metrics) + " |")
    families = [(family, pairs) for family, pairs in (("components", plan.contrasts),
                                                      ("options", plan.option_contrasts)) if pairs]  # fmt: skip
    if not plan.primary and not families:
        return lines
    lines += [
        "",
        "Paired differences a − b by seed for the primary contrast (tested alone) and each family's contrasts, with "
        "the statistics of the primary metric: 95% t interval, paired t and exact sign-flip p, and Holm's correction "
        "within each family for each metric separately (no correction across the secondary metrics: they support "
        "or qualify the primary result, they are not findings of their own).",
    ]
    for metric in metrics:
        tests = contrast_tests(by_name, metric, plan.primary, families)
        lines += [
            "",
            f"### {metric.label}",
            "",
            "| contrast | family | n | Δ | 95% CI | p (paired t) | Holm p (t) | p (exact sign-flip) "
            "| Holm p (sign-flip) |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for c in tests:
            t = c.test
            delta = "—" if math.isnan(t.mean) else f"{t.mean:+.3f}"
            ci = "n < 2" if t.n < 2 else f"[{t.low:+.3f}, {t.high:+.3f}]"
            holm = ("alone", "alone") if c.family == "primary" else (_p(c.t_holm), _p(c.sign_flip_holm))
            lines.append(
                f"| {c.name} | {c.family} | {t.n} | {delta} | {ci} | {_p(t.t_p)} | {holm[0]} | "
                f"{_p(t.sign_flip_p)} | {holm[1]} |"
            )
    return lines
