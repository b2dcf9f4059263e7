"""A resource-limited subprocess runner: rlimits, process-group timeout, scrubbed environment, optional bubblewrap.

:func:`run_limited` runs one command with ``RLIMIT_CPU``/``RLIMIT_AS``/``RLIMIT_FSIZE`` limits, a scrubbed
environment and a wall-clock timeout that kills the whole process group; with ``use_bwrap`` it runs inside a
bubblewrap sandbox (no network/IPC/PID sharing, read-only system directories, only the work directory writable).
:class:`~trl_loo_gspo.rewards.proofs.CoqBackend` runs ``coqc`` through it.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["RunOutcome", "run_limited"]

_OUTPUT_CAP = 64 * 1024  # bytes of coqc output kept


@dataclass
class RunOutcome:
    """What one sandboxed command did."""

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    elapsed: float


def _bwrap_prefix(workdir: str, extra_ro: Sequence[str]) -> list[str]:
    """A bubblewrap command line: no network/IPC/PID sharing, read-only system dirs, only ``workdir`` writable."""
    args = ["bwrap", "--unshare-all", "--die-with-parent", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    for path in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt", *extra_ro):
        args += ["--ro-bind-try", path, path]
    return [*args, "--bind", workdir, workdir, "--chdir", workdir]


def run_limited(
    argv: Sequence[str],
    workdir: str,
    timeout: float,
    *,
    memory_mb: int | None = 4096,
    file_size_mb: int = 16,
    nproc: int | None = None,
    use_bwrap: bool = False,
    extra_ro: Sequence[str] = (),
) -> RunOutcome:
    """Run ``argv`` in ``workdir`` with rlimits, a scrubbed environment and a wall-clock timeout.

    The child starts a new session; on timeout the whole process group is killed (``SIGKILL``). ``RLIMIT_CPU`` is
    the timeout rounded up plus one second; ``RLIMIT_AS``/``RLIMIT_FSIZE`` bound memory and written files;
    ``RLIMIT_NPROC`` is off by default (it counts every thread of the user, and Coq tactics cannot spawn processes).
    stdout/stderr go to files in ``workdir`` (size-limited by ``RLIMIT_FSIZE``), of which the first 64 KiB are read.
    """
    cpu = int(timeout) + 2

    def limits() -> None:  # runs in the child between fork and exec
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
        if memory_mb is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_mb << 20, file_size_mb << 20))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if nproc is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))

    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "LANG": "C.UTF-8", "TMPDIR": workdir}
    command = [*(_bwrap_prefix(workdir, extra_ro) if use_bwrap else []), *argv]
    out_path, err_path = os.path.join(workdir, ".stdout"), os.path.join(workdir, ".stderr")
    start = time.monotonic()
    timed_out = False
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        proc = subprocess.Popen(
            command,
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
            preexec_fn=limits,
        )
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
    elapsed = time.monotonic() - start

    def read(path: str) -> str:
        with open(path, "rb") as handle:
            return handle.read(_OUTPUT_CAP).decode("utf-8", "replace")

    rc = proc.returncode
    if rc in (-signal.SIGXCPU, 128 + signal.SIGXCPU):
        timed_out = True
    return RunOutcome(rc, read(out_path), read(err_path), timed_out, elapsed)
