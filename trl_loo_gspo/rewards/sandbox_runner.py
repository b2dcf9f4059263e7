"""The trusted part of every sandbox run: read as text by :mod:`.sandbox`, never imported.

It runs as ``python -I -S -c <this file's text> <cfg_fd> <res_fd>`` inside the sandbox and must only use the
standard library. It reads its configuration, sets the rlimits, drops privileges, makes itself non-dumpable (no
process of the same uid can read its memory or its file descriptors through ``/proc``), then:

* mode ``io``: ``exec`` of a fresh interpreter on the program (decoded as UTF-8 text, whatever coding cookie it
  declares), stdin redirected; the host compares stdout;
* mode ``tests``: for each test, a **fresh child process** forked from this runner — which never runs untrusted
  code, so every test starts from the same clean interpreter state. The child closes the result channel, runs the
  program, then the test (as rewritten by :mod:`.assert_split`: split asserts report their calls' values through
  ``__loo_probe__`` as plain data, see :mod:`.plain_data`), and writes its reports to a pipe of its own. The runner
  reads that pipe (capped), waits for the child, and forwards one ``ENTRY`` record per test on the result channel.

Result channel lines (each tagged with the run's nonce): ``READY``, ``ERROR <why>``, ``PROGRAM_ERROR <exception>``,
``ENTRY <i> <exit status> <JSON string of the child's report lines>``, ``DONE <n>``.
"""

import json
import os
import resource
import sys


def _encoder():
    """The plain-data encoder (format in ``plain_data.py``), with references taken before any untrusted code."""
    import collections

    _type, _repr_i, _repr_f, _hex = type, int.__repr__, float.__repr__, bytes.hex
    _items, _list_iter = dict.items, list.__iter__
    dicts = (dict, collections.OrderedDict, collections.defaultdict, collections.Counter)
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
        if t in dicts:
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


def _main():
    _write, _exec, _compile, _exit = os.write, exec, compile, os._exit
    _BaseException, _type, _str, _len, _dumps = BaseException, type, str, len, json.dumps
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
        with open("main.py", "w", encoding="utf-8") as f:
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
    _not_dumpable(dropped=uid is not None)
    emit("READY")
    if cfg["mode"] == "io":
        os.close(res_fd)
        # the program is decoded as UTF-8 text, as the host analysed it: a coding cookie cannot change its meaning
        code = "exec(compile(open('main.py', encoding='utf-8').read(), 'main.py', 'exec'))"
        os.execv(sys.executable, [sys.executable, "-I", "-S", "-c", code])
    enc, unserialisable = _encoder()
    program, tests, cap = cfg["program"], cfg["tests"], int(cfg.get("entry_bytes", 1 << 20))
    del cfg
    for i, source in enumerate(tests):
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
        report = b"".join(chunks).decode("utf-8", "replace")
        _write(res_fd, (f"{nonce} ENTRY {i} {status} " + _dumps(report) + "\n").encode())
    emit("DONE", _len(tests))
    try:
        sys.__stdout__.flush()
        sys.__stderr__.flush()
    except _BaseException:
        pass
    _exit(0)


def _child(program, source, w, enc, unserialisable):
    """One test in a fresh process: the program, then the test; reports go to ``w`` as JSON lines."""
    _write, _dumps, _type, _BaseException = os.write, json.dumps, type, BaseException

    def report(item):
        data = (_dumps(item) + "\n").encode()
        while data:
            data = data[_write(w, data) :]

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

    import types

    main = types.ModuleType("__main__")
    main.__file__ = os.path.join(os.getcwd(), "main.py")
    sys.modules["__main__"] = main
    ns = main.__dict__
    try:
        exec(compile(program, "main.py", "exec"), ns)
    except _BaseException as err:
        report(["program_error", _type(err).__name__])
        return
    ns["__loo_probe__"] = probe
    try:
        exec(compile(source, "<test>", "exec"), ns)
    except _BaseException as err:
        report(["error", _type(err).__name__])
        return
    report(["end"])


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
