"""The trusted part of every sandbox run: read as text by :mod:`.bubblewrap`, never imported.

It runs as ``python -I -S -c <this file's text> <cfg_fd> <res_fd>`` inside the sandbox and must only use the
standard library. It reads its configuration, sets the rlimits, drops privileges, makes itself non-dumpable (no
process of the same uid can read its memory or its file descriptors through ``/proc``), then:

* mode ``io``: the program runs in this process (nothing untrusted ran here before), compiled from the UTF-8 text
  the host analysed whatever coding cookie it declares, stdin redirected; the host compares stdout;
* mode ``tests``: for each test, a **fresh child process** forked from this runner — which never runs untrusted
  code, so every test starts from the same clean interpreter state. The child closes the result channel, runs the
  program, then the test (as rewritten by :mod:`trl_loo_gspo.verifiers.code.assert_split`: split asserts report
  their calls' values through ``__loo_probe__`` as plain data, see :mod:`trl_loo_gspo.verifiers.code.plain_data`),
  and writes its reports to a pipe of its own. The runner reads that pipe (capped), waits for the child, and
  forwards one ``ENTRY`` record per test on the result channel.

Result channel lines (each tagged with the run's nonce): ``READY``, ``ERROR <why>``, ``PROGRAM_ERROR <exception>``,
``ENTRY <i> <exit status> <n bytes>`` followed by exactly that many bytes (the child's report lines, UTF-8 JSON),
``DONE <n>``.
"""

import marshal
import os
import resource
import sys

#: JSON string escapes (the runner writes JSON by hand: importing ``json`` costs ~8 ms, a third of a small run)
_ESCAPES = {ord('"'): '\\"', ord("\\"): "\\\\", **{i: f"\\u{i:04x}" for i in range(32)}}


def _json(x):
    """JSON text of None/bool/int/str/list (what the reports contain); non-ASCII characters are written as is."""
    t = type(x)
    if x is None:
        return "null"
    if t is bool:
        return "true" if x else "false"
    if t is int:
        return int.__repr__(x)
    if t is str:
        return '"' + x.translate(_ESCAPES) + '"'
    return "[" + ",".join([_json(item) for item in x]) + "]"


def _encoder():
    """The plain-data encoder (format: ``verifiers/code/plain_data.py``), references taken before untrusted code."""
    _type, _repr_i, _repr_f, _hex, _items, _modules = (
        type,
        int.__repr__,
        float.__repr__,
        bytes.hex,
        dict.items,
        sys.modules,
    )
    seqs = {list: "l", tuple: "t", set: "S", frozenset: "F"}
    iterators = {
        _type(x for x in ()),
        map,
        filter,
        zip,
        enumerate,
        reversed,
        _type(iter([])),
        _type(iter(())),
        _type(iter(range(0))),
        _type({}.values()),
        _type({}.items()),
        _type(iter({}.values())),
    }
    keys = _type({}.keys())

    class Unserialisable(Exception):
        pass

    def enc(v, depth=0):
        if depth > 100:
            raise Unserialisable("nested too deeply")
        t = _type(v)
        if v is None or t is bool:
            return v
        if t is int:
            return ["i", _repr_i(v)]
        if t is float:
            return ["f", _repr_f(v)]
        if t is complex:
            return ["c", _repr_f(v.real), _repr_f(v.imag)]
        if t is str:
            return ["s", v]
        if t is bytes:
            return ["b", _hex(v)]
        if t in seqs:
            return [seqs[t], [enc(x, depth + 1) for x in v]]
        if t is dict or t in _mapping_types(_modules):
            return ["d", [[enc(k, depth + 1), enc(x, depth + 1)] for k, x in _items(v)]]
        if t is keys:
            return ["S", [enc(x, depth + 1) for x in v]]
        if t in iterators:
            out = []
            for x in v:
                out.append(enc(x, depth + 1))
                if len(out) > 1_000_000:
                    raise Unserialisable("iterator too long")
            return ["it", out]
        raise Unserialisable(t.__name__)

    return enc, Unserialisable


def _mapping_types(modules):
    """Counter / OrderedDict / defaultdict, if the program imported ``collections`` (none of its values can be one
    otherwise). Whatever class is found there, ``dict.items`` reads the dict's own storage and the host rebuilds a
    plain ``dict``: a subclass's methods never reach the comparison."""
    collections = modules.get("collections")
    types = [getattr(collections, name, None) for name in ("Counter", "OrderedDict", "defaultdict")]
    return [t for t in types if isinstance(t, type) and issubclass(t, dict)]


def _main():
    _write, _exec, _compile, _exit = os.write, exec, compile, os._exit
    _BaseException, _type, _str, _len = BaseException, type, str, len
    cfg_fd, res_fd = int(sys.argv[1]), int(sys.argv[2])
    with os.fdopen(cfg_fd, "rb") as f:
        cfg = marshal.loads(f.read())  # written by the host (trusted), same interpreter
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
        with open("main.py", "w", encoding="utf-8") as f:
            f.write(cfg["program"])
        os.chmod("main.py", 0o444)
        sys.argv = ["main.py"]
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
    if cfg.get("expect_seccomp") and not _confined():
        emit("ERROR", "seccomp-filter-not-active")
        _exit(3)
    _not_dumpable(dropped=uid is not None)
    emit("READY")
    if cfg["mode"] == "io":
        os.close(res_fd)
        program = cfg["program"]
        del cfg
        _exit(_run_main(program))
    enc, unserialisable = _encoder()
    program, tests, cap = cfg["program"], cfg["tests"], int(cfg.get("entry_bytes", 1 << 20))
    del cfg
    # compiling runs nothing: done once here, each child only executes (the host compiled the program already)
    try:
        program = _compile(program, "main.py", "exec")
    except _BaseException:
        pass  # each child compiles it again and reports the error as the program's
    for i, source in enumerate(tests):
        try:
            source = _compile(source, "<test>", "exec")
        except _BaseException:
            pass  # the child compiles it again and reports the error
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            os.close(res_fd)
            _child(program, source, w, enc, unserialisable)
            try:  # the program's own output, for the stdout/stderr excerpts
                sys.__stdout__.flush()
                sys.__stderr__.flush()
            except _BaseException:
                pass
            _exit(0)
        os.close(w)
        chunks, size = [], 0
        while True:
            chunk = os.read(r, 65536)
            if not chunk:
                break
            size += _len(chunk)
            if size > cap:
                os.kill(pid, 9)
                chunks = [b'["error", "report too large"]\n']
                break
            chunks.append(chunk)
        os.close(r)
        _, status = os.waitpid(pid, 0)
        report = b"".join(chunks)
        _write_all(res_fd, f"{nonce} ENTRY {i} {status} {_len(report)}\n".encode() + report)
    emit("DONE", _len(tests))
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


def _child(program, source, w, enc, unserialisable):
    """One test in a fresh process: the program, then the test; reports go to ``w`` as JSON lines."""
    _type, _BaseException, _write_all_ = type, BaseException, _write_all

    def report(item):
        _write_all_(w, (_json(item) + "\n").encode("utf-8", "surrogatepass"))

    def probe(k, *thunks):
        values = []
        for thunk in thunks:
            try:
                value = thunk()
            except _BaseException as err:
                values.append([0, _type(err).__name__])
                continue
            try:
                values.append([1, enc(value)])
            except unserialisable as err:
                values.append([0, f"unserialisable: {err}"])
            except _BaseException as err:
                values.append([0, f"unserialisable: {_type(err).__name__}"])
        report(["p", k, values])

    main = type(sys)("__main__")
    main.__file__ = os.path.join(os.getcwd(), "main.py")
    sys.modules["__main__"] = main
    ns = main.__dict__
    try:
        exec(program if type(program) is not str else compile(program, "main.py", "exec"), ns)
    except _BaseException as err:
        report(["program_error", _type(err).__name__])
        return
    ns["__loo_probe__"] = probe
    try:
        exec(source if type(source) is not str else compile(source, "<test>", "exec"), ns)
    except _BaseException as err:
        report(["error", _type(err).__name__])
        return
    report(["end"])


def _confined():
    """Whether the kernel reports our seccomp filter (``Seccomp: 2``) and ``no_new_privs`` for this process."""
    with open("/proc/self/status") as f:
        status = dict(line.split(":", 1) for line in f if ":" in line)
    return status.get("Seccomp", "").strip() == "2" and status.get("NoNewPrivs", "").strip() == "1"


def _not_dumpable(dropped):
    """prctl(PR_SET_DUMPABLE, 0): same-uid processes (the tests' children) cannot ptrace us or open our fds.

    Changing uid already reset the flag to ``fs.suid_dumpable`` (0 or 2: not dumpable by our uid), so ctypes is only
    loaded when we did not change uid or that setting is 1.
    """
    try:
        if dropped:
            with open("/proc/sys/fs/suid_dumpable") as f:
                if f.read().strip() != "1":
                    return
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)
    except Exception:
        pass


if __name__ == "__main__":
    _main()
