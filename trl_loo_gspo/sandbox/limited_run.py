"""A resource-limited subprocess runner: rlimits, process-group timeout, scrubbed environment, optional bubblewrap.

:func:`run_limited` runs one command with ``RLIMIT_CPU``/``RLIMIT_AS``/``RLIMIT_FSIZE`` limits, a scrubbed
environment and a wall-clock timeout that kills the whole process group; with ``use_bwrap`` it runs inside a
bubblewrap sandbox (no network/IPC/PID sharing, read-only system directories, only the work directory writable).
:class:`~trl_loo_gspo.verifiers.proofs.coq.CoqBackend` runs ``coqc`` through it.

Whether the sandboxed command ran at all is read from bubblewrap's own ``--json-status-fd`` channel, never from the
command's output: bubblewrap writes an ``{"exit-code": N}`` document there (from outside the sandbox, on a pipe the
sandboxed process does not inherit) only when the command was executed, and none when the sandbox could not be set
up or the command could not be started. A program that prints ``bwrap: ...`` cannot make its own failure look like a
sandbox failure.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["OUTPUT_CAP", "RunOutcome", "run_limited"]

#: Bytes of a command's output kept (each stream).
OUTPUT_CAP = 64 * 1024


@dataclass
class RunOutcome:
    """What one sandboxed command did.

    Attributes:
        started: the command itself was executed — with bubblewrap, bubblewrap reported its exit status on
            ``--json-status-fd`` (``False``: the sandbox failed before or while starting it); without bubblewrap,
            always ``True`` (``subprocess`` raises when it cannot start a program). Not meaningful on a timeout.
    """

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    elapsed: float
    started: bool = True


def _bwrap_prefix(workdir: str, extra_ro: Sequence[str], status_fd: int | None = None) -> list[str]:
    """A bubblewrap command line: no network/IPC/PID sharing, read-only system dirs, only ``workdir`` writable;
    with ``status_fd``, bubblewrap reports the command's status there (``--json-status-fd``)."""
    args = ["bwrap", "--unshare-all", "--die-with-parent", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    for path in ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt", *extra_ro):
        args += ["--ro-bind-try", path, path]
    if status_fd is not None:
        args += ["--json-status-fd", str(status_fd)]
    return [*args, "--bind", workdir, workdir, "--chdir", workdir]


def _read_available(fd: int) -> bytes:
    """Everything readable now from the pipe ``fd`` (non-blocking: a writer still alive cannot hang the caller)."""
    os.set_blocking(fd, False)
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


def _reported_exit_code(status: bytes) -> int | None:
    """The ``exit-code`` in bubblewrap's ``--json-status-fd`` documents; ``None`` when it reported none."""
    text = status.decode("utf-8", "replace")
    decoder = json.JSONDecoder()
    position, code = 0, None
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position >= len(text):
            return code
        try:
            document, position = decoder.raw_decode(text, position)
        except ValueError:
            return code
        if isinstance(document, dict) and isinstance(document.get("exit-code"), int):
            code = document["exit-code"]


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
    ``RunOutcome.started`` says whether the command itself ran (see the module docstring).
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
    status_read, status_write = os.pipe() if use_bwrap else (-1, -1)
    try:
        prefix = _bwrap_prefix(workdir, extra_ro, status_write) if use_bwrap else []
        outcome = _run([*prefix, *argv], workdir, env, timeout, limits, pass_fds=(status_write,) if use_bwrap else ())
        if use_bwrap:
            os.close(status_write)
            status_write = -1
            outcome.started = _reported_exit_code(_read_available(status_read)) is not None
    finally:
        for fd in (status_read, status_write):
            if fd >= 0:
                os.close(fd)
    return outcome


def _run(
    command: list[str],
    workdir: str,
    env: dict[str, str],
    timeout: float,
    limits: Callable[[], None],
    pass_fds: tuple[int, ...],
) -> RunOutcome:
    """Start ``command`` in its own session, wait up to ``timeout`` (then kill its process group), read its output."""
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
            pass_fds=pass_fds,
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
            return handle.read(OUTPUT_CAP).decode("utf-8", "replace")

    rc = proc.returncode
    if rc in (-signal.SIGXCPU, 128 + signal.SIGXCPU):
        timed_out = True
    return RunOutcome(rc, read(out_path), read(err_path), timed_out, elapsed)
