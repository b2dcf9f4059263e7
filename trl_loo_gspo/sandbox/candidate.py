"""The candidate process: runs the program and answers the judge's calls (part of the sandbox's runner text).

Forked by the runner for one test, it runs the program as ``__main__`` and then serves the judge
(:mod:`.judge`) over two pipes — requests in, answers out — until the judge closes its end. It holds no other
descriptor of the run: not the result channel, not the judge's report pipe. Everything here runs in the program's
process, so nothing it sends is trusted: the judge decodes each answer strictly (:mod:`.wire`) and decides the test
itself. Standard library only.

Requests (judge → candidate): ``["call", target, args, kwargs, write_back]`` where ``target`` is ``["n", name]`` (a
name of the program's module), ``["h", k]`` (the ``k``-th object the program returned) or ``["m", target, attr]``
(an attribute of a target); each argument is ``["v", value]`` (plain data) or ``["r", target]`` (an object of the
program's own). Answers: ``["ready"]`` or ``["program_error", exception]`` first, then per call ``["ok", value,
args_after | null]``, ``["obj", k, type name]`` (the result is not plain data: kept here as handle ``k``), ``["raise",
exception, args | null]`` (the nearest built-in exception class of what the call raised, and its arguments when
they are plain data) or ``["error", why]``.
"""

import os
import sys

if __name__ != "__main__":  # imported on the host (tests); in the sandbox these files are one text
    from .wire import WireReader, wire_writer


def run_candidate(program, req_r, resp_w, codec, parse, frame_cap):
    """Run ``program`` (a code object or source) and serve calls until end of file on ``req_r``."""
    encode, decode, unplain = codec
    _type, _BaseException, _getattr, _len, _tuple = type, BaseException, getattr, len, tuple
    import builtins

    builtin_exceptions = {c for c in vars(builtins).values() if _type(c) is type and issubclass(c, _BaseException)}
    send, reader = wire_writer()[1], WireReader(req_r, frame_cap)

    def exception_name(err):
        for klass in _type(err).__mro__:
            if klass in builtin_exceptions:
                return klass.__name__
        return "Exception"

    def exception_args(err):
        try:
            return encode(_tuple(err.args))
        except _BaseException:
            return None

    main = type(sys)("__main__")
    main.__file__ = os.path.join(os.getcwd(), "main.py")
    sys.modules["__main__"] = main
    ns = main.__dict__
    try:
        exec(program if type(program) is not str else compile(program, "main.py", "exec"), ns)
    except _BaseException as err:
        send(resp_w, ["program_error", exception_name(err)])
        return
    _flush()
    send(resp_w, ["ready"])
    handles = []

    def resolve(target):
        kind = target[0]
        if kind == "n":
            if target[1] not in ns:
                raise NameError(target[1])
            return ns[target[1]]
        if kind == "h":
            return handles[target[1]]
        return _getattr(resolve(target[1]), target[2])

    def argument(arg):
        return resolve(arg[1]) if arg[0] == "r" else decode(arg[1])

    while True:
        try:
            frame = reader.read()
        except ValueError:
            return
        if frame is None:
            return
        try:
            _, target, args, kwargs, write_back = parse(frame)
            args = [argument(a) for a in args]
            kwargs = {k: argument(v) for k, v in kwargs}
            function = resolve(target)
        except _BaseException as err:
            send(resp_w, ["raise", exception_name(err), None])
            continue
        try:
            value = function(*args, **kwargs)
        except _BaseException as err:
            answer = ["raise", exception_name(err), exception_args(err)]
        else:
            try:
                after = [encode(a) for a in args] if write_back else None
            except _BaseException:
                after = None
            try:
                answer = ["ok", encode(value), after]
            except unplain as err:
                if _type(value) in (list, tuple, set, frozenset, dict):
                    answer = ["error", f"unserialisable: {err}"]
                else:
                    handles.append(value)
                    answer = ["obj", _len(handles) - 1, _type(value).__name__[:100]]
            except _BaseException as err:
                answer = ["error", f"unserialisable: {_type(err).__name__}"]
        _flush()
        send(resp_w, answer)


def _flush():
    """The program's own output, for the run's stdout/stderr excerpts (the runner kills this process at the end)."""
    try:
        sys.__stdout__.flush()
        sys.__stderr__.flush()
    except BaseException:
        pass
