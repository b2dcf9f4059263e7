"""pytest plugin for TRL's test tree run against the installed TRL (loaded with ``-p trl_suite_shim``).

The one compatibility shim: the newest TRL test tree available offline (``main``) imports
``trl.import_utils.is_joblib_available`` in ``tests/testing_utils.py``; TRL 1.16 no longer has it. Rather than edit
``testing_utils.py``, this plugin adds that function (``joblib`` importable) before the test modules are collected.
It changes nothing when the installed TRL has it. The report header names what the run imported; with
``TRL_SUITE_ONLY`` set to a file of test ids, only those tests run (``run.sh --ours-only``).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from pathlib import Path

import trl

import_utils = importlib.import_module("trl.import_utils")

SHIMMED: list[str] = []

if not hasattr(import_utils, "is_joblib_available"):

    def is_joblib_available() -> bool:
        return importlib.util.find_spec("joblib") is not None

    import_utils.is_joblib_available = is_joblib_available
    SHIMMED.append("trl.import_utils.is_joblib_available")


def header_lines() -> list[str]:
    lines = [f"trl {trl.__version__} from {trl.__file__}"]
    if importlib.util.find_spec("trl_loo_gspo") is not None:
        import trl_loo_gspo

        lines.append(f"trl_loo_gspo from {trl_loo_gspo.__file__}")
    lines.append(f"trl_suite_shim: added {', '.join(SHIMMED) or 'nothing'}")
    return lines


def pytest_sessionstart(session):
    """Print what this run imports, also under ``-q`` (which hides the report header)."""
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        for line in header_lines():
            reporter.write_line(line)


def junit_key(nodeid: str) -> str:
    """The ``classname::name`` that pytest's junit xml writes for a node id (as ``compare.py`` reads it)."""
    names = nodeid.split("::")
    names[0] = names[0].replace("/", ".").removesuffix(".py")
    return f"{'.'.join(names[:-1])}::{names[-1]}"


def pytest_collection_modifyitems(config, items):
    """With ``TRL_SUITE_ONLY=<file>`` (one junit key a line, from ``compare.py --ids``), run only those tests."""
    path = os.environ.get("TRL_SUITE_ONLY")
    if not path:
        return
    wanted = set(Path(path).read_text().split("\n")) - {""}
    keep = [item for item in items if junit_key(item.nodeid) in wanted]
    config.hook.pytest_deselected(items=[item for item in items if junit_key(item.nodeid) not in wanted])
    items[:] = keep
