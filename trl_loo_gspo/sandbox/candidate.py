"""The candidate process: runs the program and answers the judge's calls (part of the sandbox's runner text).

Forked by the runner for one test, it imports the program as module ``main`` (so an ``if __name__ == "__main__":``
block does not run, as in HumanEval's and MBPP's harnesses) and then serves the judge (:mod:`.judge`) over two pipes
— requests in, answers out — until the judge closes its end. It holds no other descriptor of the run: not the result
channel, not the judge's report pipe. Everything here runs in the program's process, so nothing it sends is trusted:
the judge decodes each answer strictly (:mod:`.wire`) and decides the test itself. Standard library only.

Requests (judge → candidate), ``target`` being ``["n", name]`` (a name of the program's module), ``["h", k]`` (the
``k``-th object the program handed out) or ``["m", target, attr]`` (an attribute of a target):

* ``["call", target, args, kwargs, write_back]``: each argument ``["v", value]`` (plain data, possibly holding
  ``["R", target]`` nodes: handles the judge puts back, and ``["@", k]`` nodes: the ``k``-th mutable container of
  the call's arguments met again, so aliases arrive as aliases) or ``["r", target]``; a target ``["hb", k, items]``
  is iterator handle ``k`` with the items the judge had read ahead put back in front (handle ``k`` from then on);
* ``["get", target]`` (an attribute's value), ``["len", target]``, ``["iter", target]`` (``iter()`` of a handle);
* ``["next", target, n]``: up to ``n`` items of an iterator handle;
* ``["seed", a, version]``: ``random.seed(a, version)`` in this process (the test seeded its own ``random``);
* ``["capture", [stdout?, stderr?], request]``: ``request``, with what the program prints to those streams during
  it captured (:class:`_Capture`) and sent first as ``["printed", text | null, text | null]``.

Answers: ``["ready"]`` or ``["program_error", exception]`` first, then per request ``["ok", value, states |
null]`` (``states``, when the judge asked for a write-back: the contents of each mutable container of the arguments
after the call, in the judge's numbering, the containers among them as ``["@", k]``), ``["iter", k]`` (an iterator
that is not plain data, kept here as handle ``k`` and served lazily: it may be infinite), ``["obj", k, type name]``
(any other value that is not plain data, kept as handle ``k``; the same object always gets the same ``k``),
``["items", [value, ...], ended]`` (for ``next``), ``["raise", exception, args | null]`` (the nearest built-in
exception class of what the request raised, and its arguments when they are plain data) or ``["error", why]``.
"""

import io
import os
import sys

if __name__ != "__main__":  # imported on the host (tests); in the sandbox these files are one text
    from .wire import WireReader, wire_codec, wire_writer


def run_candidate(program, req_r, resp_w, codec, parse, frame_cap):
    """Run ``program`` (a code object or source) and serve requests until end of file on ``req_r``.

    ``codec`` is the runner's; this side builds its own (~25 µs, before the program runs) that also sends a numpy
    scalar the program returns (``np.int64``, ``np.bool_``, ...) as the Python number it holds (issue #45:
    :func:`.wire.wire_codec`'s ``numpy_scalars``). Only this side converts: what the program sends is its answer,
    and the judge decodes it strictly as always."""
    encode, decode, unplain = wire_codec(numpy_scalars=True)  # in place of the runner's ``codec``
    _type, _BaseException, _getattr, _len, _tuple, _next = type, BaseException, getattr, len, tuple, next
    _StopIteration, _min, _int, _id, _enumerate, _max = StopIteration, min, int, id, enumerate, max
    from itertools import chain as _chain
    from time import monotonic as _clock

    pending = {}  # iterator handle → the exception it raised after items that were already sent
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

    # imported as module ``main``, as HumanEval's and MBPP's harnesses import a program: its
    # ``if __name__ == "__main__":`` block (a demo, a call to input()) does not run
    main = type(sys)("main")
    main.__file__ = os.path.join(os.getcwd(), "main.py")
    sys.modules["main"] = main
    ns = main.__dict__
    try:
        exec(program if type(program) is not str else compile(program, "main.py", "exec"), ns)
    except _BaseException as err:
        send(resp_w, ["program_error", exception_name(err)])
        return
    _flush()
    send(resp_w, ["ready"])
    handles, numbers, alive = [], {}, []  # handle k's object; id → k; every object ever numbered (ids stay unique)

    def raising(err):
        raise err
        yield  # pragma: no cover - a generator that raises ``err`` at its first ``next``

    def resolve(target):
        kind = target[0]
        if kind == "n":
            if target[1] not in ns:
                raise NameError(target[1])
            return ns[target[1]]
        if kind == "h":
            return handles[target[1]]
        if kind == "hb":  # an iterator the judge read ahead: the items it held, then the rest; it becomes handle k
            key, items = target[1], [decode(x, resolve) for x in target[2]]
            rest = (raising(pending.pop(key)), handles[key]) if key in pending else (handles[key],)
            handles[key] = _chain(items, *rest)  # the judge no longer holds those items: served once, from here
            numbers[_id(handles[key])] = key
            alive.append(handles[key])
            return handles[key]
        return _getattr(resolve(target[1]), target[2])

    def argument(arg, shared):
        return resolve(arg[1]) if arg[0] == "r" else decode(arg[1], resolve, shared)

    def handle(value):
        """The handle of an object sent as one: the same object always gets the same number."""
        key = numbers.get(_id(value))
        if key is None:
            key = numbers[_id(value)] = _len(handles)
            handles.append(value)
            alive.append(value)
        return key

    def states(shared):
        """The contents of each container of the call's arguments after the call, in the judge's numbering: an
        argument container held inside another crosses as ``["@", k]`` (the judge writes back into its own)."""
        numbered = ({_id(c): k for k, c in _enumerate(shared)}, [*shared])
        return [encode(c, None, numbered, True) for c in shared]

    def answer_value(value):
        """``["ok", value]``; an iterator not plain → ``["iter", k]`` (served lazily: it may be infinite); anything
        else not plain → ``["obj", k, type name]``."""
        if _getattr(_type(value), "__next__", None) is not None:  # never consumed here: it may be infinite
            return ["iter", handle(value)]
        try:
            return ["ok", encode(value)]
        except unplain as err:
            if _type(value) in (list, tuple, set, frozenset, dict):
                return ["error", f"unserialisable: {err}"]
            return ["obj", handle(value), _type(value).__name__[:100]]

    def serve(request):
        kind, target = request[0], request[1]
        if kind == "call":
            shared = []  # the arguments' mutable containers, numbered as the judge numbered them
            args = [argument(a, shared) for a in request[2]]
            kwargs = {k: argument(v, shared) for k, v in request[3]}
            function = resolve(target)
            value = function(*args, **kwargs)
            try:
                after = states(shared) if request[4] else None
            except _BaseException:
                after = None
            answer = answer_value(value)
            return [*answer, after] if answer[0] == "ok" else answer
        if kind == "get":
            answer = answer_value(resolve(target))
            return [*answer, None] if answer[0] == "ok" else answer
        if kind == "len":
            return ["ok", encode(_len(resolve(target))), None]
        if kind == "iter":
            answer = answer_value(iter(resolve(target)))
            return [*answer, None] if answer[0] == "ok" else answer
        if kind == "next":  # up to n items of an iterator handle (past the first only within ~2 ms); whether it ended
            key = _int(target[1]) if target[0] == "h" else None
            if key in pending:
                raise pending.pop(key)
            iterator, items, start = resolve(target), [], _clock()
            for _ in range(_min(_int(request[2]), 4096)):
                if items and _clock() - start > 0.002:
                    break
                try:
                    items.append(encode(_next(iterator)))
                except _StopIteration:
                    return ["items", items, True]
                except _BaseException as err:
                    if not items:
                        raise
                    pending[key] = err  # raised at the next request, after the items already computed
                    break
            return ["items", items, False]
        raise ValueError("unknown request")

    def seed(request):
        """``["seed", a, version]``: the test seeded its ``random``; the program's is seeded the same (issue #45)."""
        import random

        random.seed(decode(request[1]), _int(request[2]))
        return ["ok", None, None]

    capture_cap = _max(frame_cap // 8, 1)  # characters: escaped, each takes at most 6 bytes of the answer's frame
    while True:
        try:
            frame = reader.read()
        except ValueError:
            return
        if frame is None:
            return
        streams = None
        try:
            request = parse(frame)
            if request[0] == "capture":  # ["capture", [stdout?, stderr?], request]: the test redirected its streams
                streams = _Capture.install(request[1], capture_cap)
                request = request[2]
            answer = seed(request) if request[0] == "seed" else serve(request)
        except unplain as err:
            answer = ["error", f"unserialisable: {err}"]
        except _BaseException as err:
            answer = ["raise", exception_name(err), exception_args(err)]
        if streams is not None:
            send(resp_w, ["printed", *_Capture.restore(streams)])
        _flush()
        send(resp_w, answer)


class _Capture(io.StringIO):
    """What the program prints during one request, for a test that redirected its own ``sys.stdout``/``sys.stderr``
    (``contextlib.redirect_stdout``, ``sys.stdout = io.StringIO()``): sent to the judge, which writes it to the test's
    stream, so the test reads the program's output as in one process (issue #45). At most ``cap`` characters are
    kept per stream; what the program writes past them is dropped (the test sees the start). Only text written through
    ``sys.stdout``/``sys.stderr`` (``print``) is captured, as ``redirect_stdout`` does: not writes to descriptor 1."""

    def __init__(self, cap):
        super().__init__()
        self.cap = cap

    def write(self, text):
        room = self.cap - self.tell()
        if room > 0 or type(text) is not str:  # (a str past the cap is dropped; anything else raises as StringIO does)
            super().write(text[:room] if type(text) is str else text)
        return len(text)

    @staticmethod
    def install(which, cap):
        """Replace the streams ``which`` (``[stdout?, stderr?]``) by captures; returns what :meth:`restore` needs."""
        saved = (sys.stdout, sys.stderr)
        out = _Capture(cap) if type(which) is list and which[:1] == [True] else None
        err = _Capture(cap) if type(which) is list and which[1:2] == [True] else None
        if out is not None:
            sys.stdout = out
        if err is not None:
            sys.stderr = err
        return saved, out, err

    @staticmethod
    def restore(streams):
        """Put the program's streams back; the text each capture holds (``None`` where that stream was not asked)."""
        (stdout, stderr), out, err = streams
        sys.stdout, sys.stderr = stdout, stderr
        return [None if out is None else out.getvalue(), None if err is None else err.getvalue()]


def _flush():
    """The program's own output, for the run's stdout/stderr excerpts (the runner kills this process at the end)."""
    try:
        sys.__stdout__.flush()
        sys.__stderr__.flush()
    except BaseException:
        pass
