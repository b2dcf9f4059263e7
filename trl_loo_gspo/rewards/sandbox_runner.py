"""The trusted part of every sandbox run: read as text by :mod:`.sandbox`, never imported.

It runs as ``python -I -S -c <this file's text> <cfg_fd> <res_fd>`` inside the sandbox and must only use the
standard library. It reads its configuration, drops privileges, then runs the program (mode ``tests``: in process,
followed by each assert; mode ``io``: ``exec`` of a fresh interpreter on the program, stdin redirected).
"""

import json
import os
import resource
import sys


def _main():
    _write, _exec, _compile, _exit, _repr = os.write, exec, compile, os._exit, repr
    _BaseException, _type, _str, _len = BaseException, type, str, len
    cfg_fd, res_fd = int(sys.argv[1]), int(sys.argv[2])
    with os.fdopen(cfg_fd, "rb") as f:
        cfg = json.loads(f.read())
    nonce, workdir = cfg["nonce"], cfg["workdir"]
    os.chdir(workdir)

    def emit(*parts):
        line = " ".join([nonce, *[_str(p).replace("\n", " ")[:300] for p in parts]]) + "\n"
        _write(res_fd, line.encode())

    if cfg["mode"] == "io":
        with open(".stdin", "wb") as f:
            f.write(cfg["stdin"].encode())
        fd = os.open(".stdin", os.O_RDONLY)
        os.dup2(fd, 0)
        os.close(fd)
        os.unlink(".stdin")
        with open("main.py", "w") as f:
            f.write(cfg["program"])
        os.chmod("main.py", 0o444)
    if cfg.get("chmod_workdir"):
        os.chmod(workdir, 0o1777)
    for name, soft, hard in cfg["rlimits"]:
        resource.setrlimit(getattr(resource, name), (soft, hard))
    uid = cfg.get("uid")
    if uid is not None and os.getuid() == 0:
        os.setgroups([])
        os.setresgid(uid, uid, uid)
        os.setresuid(uid, uid, uid)
        with open("/proc/self/status") as f:
            caps = [ln.split()[1] for ln in f if ln.startswith(("CapEff:", "CapPrm:", "CapAmb:"))]
        if os.getuid() != uid or any(int(c, 16) for c in caps):
            emit("ERROR", "privileges-not-dropped")
            _exit(3)
    if cfg.get("nproc"):
        n = cfg["nproc"]
        resource.setrlimit(resource.RLIMIT_NPROC, (n, n))
    emit("READY")
    if cfg["mode"] == "io":
        os.close(res_fd)
        os.execv(sys.executable, [sys.executable, "-I", "-S", "main.py"])
    import types

    main = types.ModuleType("__main__")
    main.__file__ = os.path.join(workdir, "main.py")
    sys.modules["__main__"] = main
    ns = main.__dict__
    tests = cfg["tests"]
    program = cfg["program"]
    del cfg
    try:
        _exec(_compile(program, "main.py", "exec"), ns)
    except _BaseException as err:
        emit("PROGRAM_ERROR", _type(err).__name__)
        sys.stdout.flush()
        _exit(0)
    for i, test in enumerate(tests):
        try:
            _exec(_compile(test, f"<test {i}>", "exec"), ns)
        except _BaseException as err:
            emit("TEST", i, "FAIL", _type(err).__name__)
        else:
            emit("TEST", i, "PASS", "-")
    emit("DONE", _len(tests))
    try:
        sys.__stdout__.flush()
        sys.__stderr__.flush()
    except _BaseException:
        pass
    _exit(0)


if __name__ == "__main__":
    _main()
