"""A seccomp-BPF deny-list for the code sandbox, written out as classic BPF by hand (method §2.1).

Why by hand: libseccomp (and its Python binding) is not available to this interpreter, and the filter is small
and fixed, so :func:`deny_filter` assembles the ``struct sock_filter`` array itself. bwrap installs it with
``--seccomp FD`` as the last step before it ``exec``\\ s the trusted runner, after ``no_new_privs``; it then applies
to the runner and to everything the untrusted program starts, and cannot be removed.

What the filter does, per system call (``struct seccomp_data``: ``nr`` at offset 0, ``arch`` at 4, ``args[i]``
at ``16 + 8 i``):

* ``arch`` is ``AUDIT_ARCH_X86_64`` or ``AUDIT_ARCH_AARCH64``: the matching table below applies. On x86_64 every
  call with the x32 bit (``0x40000000``) set in ``nr`` is denied (the x32 ABI has its own numbers).
* any other ``arch`` — e.g. i386 ``int 0x80`` calls made from an x86_64 process, or AArch32 compat calls — kills
  the process: a foreign ABI has other numbers, so the deny-list would not apply to it.
* denied with ``EPERM``: everything that builds or enters namespaces or changes mounts (``unshare``, ``setns``,
  ``mount``, ``umount2``, ``pivot_root``, the new mount API ``fsopen``/``fsconfig``/``fsmount``/``move_mount``/
  ``open_tree``/``open_tree_attr``/``fspick``/``mount_setattr``; ``clone`` when its flags hold any
  ``CLONE_NEW*`` namespace bit), access to other processes' memory (``ptrace``, ``process_vm_readv``/``writev``,
  ``pidfd_getfd``), large kernel attack surface no test program needs (``bpf``, ``perf_event_open``, ``keyctl``,
  ``add_key``, ``request_key``, ``userfaultfd``, ``io_uring_setup``/``enter``/``register``), kernel loading
  (``kexec_load``, ``kexec_file_load``, ``init_module``, ``finit_module``, ``delete_module``) and System V shared
  memory / message queues (``shmget``, ``msgget``: memory that outlives its creator, outside every rlimit and tmpfs
  cap, until the sandbox's IPC namespace dies).
* ``clone3`` fails with ``ENOSYS``: its flags live in a struct in user memory, which seccomp cannot read, so it is
  refused as "not implemented" and glibc (threads, ``posix_spawn``) falls back to ``clone``, whose flags it can.
* everything else is allowed. A deny-list cannot know system calls added to the kernel after it was written.
"""

from __future__ import annotations

import functools
import platform
import struct
from collections.abc import Sequence

# -- classic BPF (linux/filter.h, linux/bpf_common.h) ------------------------------------------------------------
BPF_LD, BPF_JMP, BPF_RET = 0x00, 0x05, 0x06
BPF_W, BPF_ABS, BPF_K = 0x00, 0x20, 0x00
BPF_JEQ, BPF_JGE, BPF_JSET = 0x10, 0x30, 0x40
LD_ABS_W = BPF_LD | BPF_W | BPF_ABS  #: A = *(u32 *)(seccomp_data + k)
JEQ_K, JGE_K, JSET_K = BPF_JMP | BPF_JEQ | BPF_K, BPF_JMP | BPF_JGE | BPF_K, BPF_JMP | BPF_JSET | BPF_K
RET_K = BPF_RET | BPF_K

# -- seccomp (linux/seccomp.h, linux/audit.h, linux/elf-em.h) ------------------------------------------------
SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000
AUDIT_ARCH_X86_64 = 0xC000003E  #: EM_X86_64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE
AUDIT_ARCH_AARCH64 = 0xC00000B7  #: EM_AARCH64 | __AUDIT_ARCH_64BIT | __AUDIT_ARCH_LE
X32_SYSCALL_BIT = 0x40000000
OFFSET_NR, OFFSET_ARCH, OFFSET_ARG0_LO = 0, 4, 16  #: args are u64 in native (little-endian) order
EPERM, ENOSYS = 1, 38

#: Every CLONE_NEW* namespace flag ``clone`` accepts: NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET.
#: (CLONE_NEWTIME, 0x80, overlaps the exit-signal byte of ``clone`` and is only honoured by ``unshare``/``clone3``.)
CLONE_NEW_MASK = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000

#: The denied calls, by name (all answered ``EPERM``); ``clone`` (flags-checked) and ``clone3`` are separate.
DENIED = (
    "unshare", "setns", "mount", "umount2", "pivot_root",
    "fsopen", "fsconfig", "fsmount", "move_mount", "open_tree", "open_tree_attr", "fspick", "mount_setattr",
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd",
    "bpf", "perf_event_open", "keyctl", "add_key", "request_key", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
    "shmget", "msgget",
)  # fmt: skip

#: System call numbers (arch/x86/entry/syscalls/syscall_64.tbl and include/uapi/asm-generic/unistd.h).
SYSCALLS: dict[str, dict[str, int]] = {
    "x86_64": {
        "clone": 56, "clone3": 435,
        "unshare": 272, "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155,
        "fsopen": 430, "fsconfig": 431, "fsmount": 432, "move_mount": 429, "open_tree": 428,
        "open_tree_attr": 467, "fspick": 433, "mount_setattr": 442,
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "pidfd_getfd": 438,
        "bpf": 321, "perf_event_open": 298, "keyctl": 250, "add_key": 248, "request_key": 249,
        "userfaultfd": 323, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313, "delete_module": 176,
        "shmget": 29, "msgget": 68,
    },
    "aarch64": {
        "clone": 220, "clone3": 435,
        "unshare": 97, "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41,
        "fsopen": 430, "fsconfig": 431, "fsmount": 432, "move_mount": 429, "open_tree": 428,
        "open_tree_attr": 467, "fspick": 433, "mount_setattr": 442,
        "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "pidfd_getfd": 438,
        "bpf": 280, "perf_event_open": 241, "keyctl": 219, "add_key": 217, "request_key": 218,
        "userfaultfd": 282, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "kexec_load": 104, "kexec_file_load": 294, "init_module": 105, "finit_module": 273, "delete_module": 106,
        "shmget": 194, "msgget": 186,
    },
}  # fmt: skip

AUDIT_ARCH = {"x86_64": AUDIT_ARCH_X86_64, "aarch64": AUDIT_ARCH_AARCH64}
#: ``platform.machine()`` spellings of the architectures the filter knows.
MACHINES = {"x86_64": "x86_64", "amd64": "x86_64", "aarch64": "aarch64", "arm64": "aarch64"}

_INSN = struct.Struct("=HBBI")  #: struct sock_filter { __u16 code; __u8 jt; __u8 jf; __u32 k; }, native order
BPF_MAXINSNS = 4096

# One instruction before label resolution: (code, jt, jf, k); jt/jf are ints (relative) or label names.
_Insn = tuple[int, "int | str", "int | str", int]


def host_arch() -> str | None:
    """The filter's name for this machine's architecture (``"x86_64"``/``"aarch64"``), or None if unknown."""
    return MACHINES.get(platform.machine().lower())


def _arch_section(arch: str) -> list[_Insn | str]:
    """Instructions for one architecture, entered with ``A = arch`` already matched; labels are plain strings."""
    nrs = SYSCALLS[arch]
    body: list[_Insn | str] = [f"{arch}:", (LD_ABS_W, 0, 0, OFFSET_NR)]
    if arch == "x86_64":
        body.append((JGE_K, "deny", 0, X32_SYSCALL_BIT))  # x32 ABI (and nr = -1): denied outright
    body.append((JEQ_K, f"{arch}_clone", 0, nrs["clone"]))
    body.append((JEQ_K, "enosys", 0, nrs["clone3"]))
    for name in DENIED:
        body.append((JEQ_K, "deny", 0, nrs[name]))
    body.append((RET_K, 0, 0, SECCOMP_RET_ALLOW))
    body += [f"{arch}_clone:", (LD_ABS_W, 0, 0, OFFSET_ARG0_LO), (JSET_K, "deny", 0, CLONE_NEW_MASK)]
    body.append((RET_K, 0, 0, SECCOMP_RET_ALLOW))
    return body


def _assemble(program: Sequence[_Insn | str]) -> list[tuple[int, int, int, int]]:
    """Resolve ``"label:"`` markers and label jump targets into relative offsets (classic BPF jumps forward only)."""
    labels: dict[str, int] = {}
    insns: list[_Insn] = []
    for item in program:
        if isinstance(item, str):
            labels[item.rstrip(":")] = len(insns)
        else:
            insns.append(item)
    out = []
    for pc, (code, jt, jf, k) in enumerate(insns):
        rel = []
        for target in (jt, jf):
            if isinstance(target, str):
                target = labels[target] - pc - 1
            if not 0 <= target <= 255:
                raise ValueError(f"jump at {pc} out of range: {target}")
            rel.append(target)
        out.append((code, rel[0], rel[1], k))
    if len(out) > BPF_MAXINSNS:
        raise ValueError("filter too long")
    return out


def filter_instructions() -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) tuples (see the module docstring for what it does)."""
    program: list[_Insn | str] = [(LD_ABS_W, 0, 0, OFFSET_ARCH)]
    for arch in AUDIT_ARCH:
        program.append((JEQ_K, arch, 0, AUDIT_ARCH[arch]))
    program.append((RET_K, 0, 0, SECCOMP_RET_KILL_PROCESS))  # a foreign ABI: numbers we do not know
    for arch in AUDIT_ARCH:
        program += _arch_section(arch)
    program += ["deny:", (RET_K, 0, 0, SECCOMP_RET_ERRNO | EPERM)]
    program += ["enosys:", (RET_K, 0, 0, SECCOMP_RET_ERRNO | ENOSYS)]
    return _assemble(program)


@functools.lru_cache(maxsize=1)
def deny_filter() -> bytes:
    """The filter as the bytes of a ``struct sock_filter`` array, as ``bwrap --seccomp FD`` reads them.

    Pure (the same bytes on every call and host of the same byte order); it covers both x86_64 and AArch64, so the
    caller decides with :func:`host_arch` whether this machine can use it at all.
    """
    return b"".join(_INSN.pack(*insn) for insn in filter_instructions())
