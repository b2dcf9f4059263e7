"""Smoke test of ``benchmarks/precision.py`` (issue 35) at its tiniest settings: structure, float32 control is 0."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import torch

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "precision.py"


def _load():
    spec = importlib.util.spec_from_file_location("precision_benchmark", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_precision_benchmark_tiny(tmp_path: Path, capsys) -> None:
    bench = _load()
    threads = torch.get_num_threads()
    try:
        result = bench.main(["--tiny", "--lengths", "8", "--answers", "4", "--json", str(tmp_path / "out.json")])
    finally:
        torch.set_num_threads(threads)
    printed = capsys.readouterr().out
    assert "| mode | T | pass |" in printed and "vLLM" in printed
    assert json.loads((tmp_path / "out.json").read_text())["rows"] == result["rows"]
    assert {"torch", "cpu", "threads", "command", "config"} <= result.keys()
    rows = {(r["mode"], r["length"], r["pass"]): r for r in result["rows"]}
    assert set(rows) == {(m, 8, p) for m in bench.MODES for p in bench.PASSES}
    same = rows[("float32", 8, "same")]
    assert same["seq_abs_max"] == 0.0 and same["tok_abs_p90"] == 0.0 and same["tok_changed"] == 0.0
    for mode in ("bf16", "bf16+fp32-head"):
        for name in bench.PASSES:
            row = rows[(mode, 8, name)]
            assert row["finite"]
            assert all(math.isfinite(v) for v in row.values() if isinstance(v, float))
            assert 0.0 <= row["clip_gspo"] <= 1.0
