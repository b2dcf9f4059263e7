"""How the sandbox's interpreter gets its trusted code: the runner's four files joined, compiled once on the host.

``wire.py``, ``candidate.py``, ``judge.py`` and ``runner.py`` are one program inside the sandbox (never imported
there). The host compiles their joined text once per process and hands the interpreter the marshalled code object
on an inherited descriptor: ``python -I -S -c BOOT <cfg_fd> <res_fd> <code_fd>`` (the same interpreter reads it;
compiling the ~800 lines in every run cost 12–15 ms on a 2-core machine, a third of a small run).
"""

from __future__ import annotations

import functools
import marshal
import os
import tempfile
from pathlib import Path

#: The trusted part of every run, as one text.
RUNNER = "\n\n".join(
    (Path(__file__).with_name(name)).read_text(encoding="utf-8")
    for name in ("wire.py", "candidate.py", "judge.py", "runner.py")
)
#: What ``python -I -S -c`` runs: load the runner's code object from the descriptor in ``argv[3]``, close it, and run
#: it (closed first, so that no process the runner forks — the program's above all — inherits it).
BOOT = (
    "import marshal, sys\nwith open(int(sys.argv[3]), 'rb') as f:\n    code = marshal.loads(f.read())\n"
    "del f\nexec(code)\n"
)


@functools.lru_cache(maxsize=1)
def runner_code() -> bytes:
    """The runner's marshalled code object (compiled once per process)."""
    return marshal.dumps(compile(RUNNER, "<sandbox runner>", "exec"))


def readable_fd(data: bytes) -> int:
    """A descriptor of an unlinked temporary file holding ``data``, positioned at its start (the child inherits it)."""
    with tempfile.TemporaryFile() as handle:
        handle.write(data)
        handle.seek(0)
        return os.dup(handle.fileno())
