"""The README's "main job" command runs, and the tree is ruff clean."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_smoke_run_prints_metrics(tmp_path, capsys):
    from trl_loo_gspo.smoke import main

    main(["--steps", "2", "--output-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert "groups/frac_with_signal" in out and "step 2" in out


def test_ruff_clean():
    ruff = shutil.which("ruff") or pytest.skip("ruff not installed (pip install -e '.[test]')")
    for args in (["check", "."], ["format", "--check", "."]):
        result = subprocess.run([ruff, *args], cwd=ROOT, capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr
