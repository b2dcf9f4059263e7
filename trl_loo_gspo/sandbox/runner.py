"""The trusted part of every sandbox run, with :mod:`.wire`, :mod:`.candidate` and :mod:`.judge` before it in one text.

:mod:`.bubblewrap` joins the four files, compiles them once, and runs the code object inside the sandbox with ``python
-I -S -c <boot> <cfg_fd> <res_fd> <code_fd>``; standard library only. The runner reads its configuration, sets the
rlimits, drops privileges, makes itself non-dumpable (no process of the same uid can read its memory or its file
descriptors through ``/proc``; forked processes inherit that), then — with the allow-listed site packages'
directory (``/packages``, read-only) appended to ``sys.path`` for the program and the judge:

* mode ``io``: the program runs in this process (nothing untrusted ran here before), compiled from the UTF-8 text
  the host analysed whatever coding cookie it declares, stdin redirected; the host compares stdout;
* mode ``tests``: for each test, two **fresh processes** forked from this runner — which never runs untrusted code:
  a *candidate* (:mod:`.candidate`) that runs the program and answers calls, holding only its two pipes to the
  judge, and a *judge* (:mod:`.judge`) that runs the test, calls the program's functions through the candidate with
  plain data, and decides the test. The runner reads the judge's report (capped), waits for the judge, kills the
  candidate, and forwards one ``ENTRY`` record per test on the result channel.

Result channel lines (each tagged with the run's nonce): ``READY``, ``ERROR <why>``, ``ENTRY <i> <judge status>
<candidate status> <n bytes>`` followed by exactly that many bytes (the judge's report: one JSON value), ``DONE <n>``.
"""

import marshal
import os
import resource
import sys

if __name__ != "__main__":  # never imported in practice; in the sandbox these files are one text
    from .candidate import run_candidate
    from .judge import judge_report_writer, run_judge
    from .wire import wire_codec, wire_parser


def _main():
    _write, _exec, _compile, _exit = os.write, exec, compile, os._exit
    _BaseException, _type, _str, _len = BaseException, type, str, len
    cfg_fd, res_fd = int(sys.argv[1]), int(sys.argv[2])
    with os.fdopen(cfg_fd, "rb") as f:
        cfg = marshal.loads(f.read())  # written by the host (trusted), same interpreter
    nonce, workdir = cfg["nonce"], cfg["workdir"]
    os.chdir(workdir)
    if cfg.get("packages_dir"):  # the allow-listed site packages (read-only): after the standard library, so none
        sys.path.append(cfg["packages_dir"])  # of them can stand in for a module this runner imports

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
        with open("main.py", "w", encoding="utf-8") as f:
            f.write(cfg["program"])
        os.chmod("main.py", 0o444)
        sys.argv = ["main.py"]
    if cfg.get("chmod_workdir"):
        os.chmod(workdir, 0o1777)
    for name, soft, hard in cfg["rlimits"]:
        resource.setrlimit(getattr(resource, name), (soft, hard))
    uid = cfg.get("uid")
    dropped = uid is not None and os.getuid() == 0
    if dropped:
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
    if cfg.get("expect_seccomp") and not _confined():
        emit("ERROR", "seccomp-filter-not-active")
        _exit(3)
    if not _not_dumpable(dropped):
        emit("ERROR", "still-dumpable")
        _exit(3)
    emit("READY")
    if cfg["mode"] == "io":
        os.close(res_fd)
        program = cfg["program"]
        del cfg
        _exit(_run_main(program))
    codec, parse = wire_codec(), wire_parser()  # before forking: the children share the imports
    program, cap = cfg["program"], int(cfg.get("entry_bytes", 1 << 20))
    tests_fd, n_tests = cfg["tests_fd"], cfg["n_tests"]
    frame_cap = int(cfg.get("frame_bytes", 16 << 20))
    del cfg
    # compiling runs nothing: done once here, each candidate only executes (the host compiled the program already)
    try:
        program = _compile(program, "main.py", "exec")
    except _BaseException:
        pass  # each candidate compiles it again and reports the error as the program's
    for i in range(n_tests):
        judge_status, candidate_status, report = _one_test(program, i, tests_fd, res_fd, codec, parse, cap, frame_cap)
        _write_all(res_fd, f"{nonce} ENTRY {i} {judge_status} {candidate_status} {_len(report)}\n".encode() + report)
    emit("DONE", n_tests)
    try:
        sys.__stdout__.flush()
        sys.__stderr__.flush()
    except _BaseException:
        pass
    _exit(0)


def _run_main(program):
    """Mode ``io``: the program as ``python main.py`` would run it, in this process (no second interpreter start-up;
    nothing untrusted ran here before). It is compiled from the text the host analysed, so a coding cookie cannot
    change its meaning. Returns the exit status Python would give."""
    main = type(sys)("__main__")
    main.__file__ = os.path.join(os.getcwd(), "main.py")
    sys.modules["__main__"] = main
    status = 0
    try:
        exec(compile(program, "main.py", "exec"), main.__dict__)
    except SystemExit as err:
        code = err.code
        if code is None:
            status = 0
        elif type(code) is int:
            status = code & 0xFF
        else:
            print(code, file=sys.stderr)
            status = 1
    except BaseException:
        import traceback

        traceback.print_exc()
        status = 1
    try:  # what the interpreter does at a normal exit: join threads, run atexit handlers, flush
        threading = sys.modules.get("threading")
        if threading is not None:
            threading._shutdown()
        import atexit

        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:
        status = status or 120
    return status


def _write_all(fd, data):
    while data:
        data = data[os.write(fd, data) :]


def _one_test(program, index, tests_fd, res_fd, codec, parse, cap, frame_cap):
    """Test ``index``: a candidate process (the program; it gets only its two pipes to the judge) and a judge process
    (the test, read from ``tests_fd``; it never loads the program). The tests are never read here, so the candidate,
    a fork of this process, holds none of them in its memory. Returns the judge's and the candidate's wait statuses
    and the judge's report (capped at ``cap`` bytes)."""
    req_r, req_w = os.pipe()
    resp_r, resp_w = os.pipe()
    candidate = os.fork()
    if candidate == 0:
        for fd in (res_fd, req_w, resp_r, tests_fd):
            os.close(fd)
        try:
            run_candidate(program, req_r, resp_w, codec, parse, frame_cap)
        finally:
            os._exit(0)
    os.close(req_r)
    os.close(resp_w)
    rep_r, rep_w = os.pipe()
    judge = os.fork()
    if judge == 0:  # forked after the candidate: it holds none of the judge's descriptors
        os.close(res_fd)
        os.close(rep_r)
        try:
            run_judge(index, tests_fd, req_w, resp_r, judge_report_writer(rep_w), codec, parse, frame_cap)
        finally:
            os._exit(0)
    for fd in (req_w, resp_r, rep_w):
        os.close(fd)
    chunks, size = [], 0
    while True:
        chunk = os.read(rep_r, 65536)
        if not chunk:
            break
        size += len(chunk)
        if size > cap:
            os.kill(judge, 9)
            chunks = [b'["fail", "report too large", 0]']
            break
        chunks.append(chunk)
    os.close(rep_r)
    _, judge_status = os.waitpid(judge, 0)
    try:
        os.kill(candidate, 9)
    except OSError:
        pass
    _, candidate_status = os.waitpid(candidate, 0)
    return judge_status, candidate_status, b"".join(chunks)


def _confined():
    """Whether the kernel reports our seccomp filter (``Seccomp: 2``) and ``no_new_privs`` for this process."""
    with open("/proc/self/status") as f:
        status = dict(line.split(":", 1) for line in f if ":" in line)
    return status.get("Seccomp", "").strip() == "2" and status.get("NoNewPrivs", "").strip() == "1"


def _not_dumpable(dropped):
    """prctl(PR_SET_DUMPABLE, 0): same-uid processes (the tests' children) cannot ptrace us or open our fds. Returns
    whether the kernel then reports the process not dumpable (``PR_GET_DUMPABLE`` 0); the runner refuses to run a
    program otherwise.

    Changing uid (``dropped``) already reset the flag to ``fs.suid_dumpable``; where that is 0 the flag is 0, and
    the files of ``/proc/self`` are then owned by root, not by our uid — checked that way, so ctypes (about 9 ms to
    load, a third of a small run) is only loaded when we did not change uid or that setting is 1 or 2.
    """
    try:
        if dropped:
            with open("/proc/sys/fs/suid_dumpable") as f:
                if f.read().strip() == "0":
                    return os.stat("/proc/self/status").st_uid != os.getuid()
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE
        return libc.prctl(3, 0, 0, 0, 0) == 0  # PR_GET_DUMPABLE
    except Exception:
        return False


if __name__ == "__main__":
    _main()
