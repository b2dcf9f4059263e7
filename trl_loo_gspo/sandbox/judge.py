"""The judge process: runs one test of the dataset and decides it (part of the sandbox's runner text).

Forked by the runner for one test, the judge never loads the program. It runs the test's own code — asserts,
loops, the dataset's helpers, ``random``, the real builtins — in a namespace where each name of the program the test
uses is a :class:`RemoteRef`: calling one sends the arguments as plain data (:mod:`.wire`) to the candidate process
(:mod:`.candidate`) and returns the program's answer rebuilt as builtin values, so every comparison, hash, sort and
method call of the test runs here, on values whose behaviour is Python's own. The test's constants stay here: the
program gets copies as its inputs and can change nothing the judge holds (except, on purpose, the mutable arguments of
a call made as a statement, ``f(xs)``, which take the values the program left in them — keyword ones and the
containers nested in them too, each in place, so the test's aliases see the change as in Python: the test asks for
the side effect). The candidate cannot write to the judge's memory, its report pipe or the result channel (not
inherited; the judge is not dumpable and ptrace is denied), so the verdict the judge reports is the test's.

Outcomes (the report, one JSON value): ``["pass", calls]``, ``["fail", reason, calls]``, ``["weak", reason, calls]``
(the test had to hand the program something that is not plain data — a function, an object of its own — so it cannot
be judged across the boundary), ``["program_error", exception, calls]`` (the program raised before any test ran).

An object the program returns that is not plain data fails the call (``unserialisable: <type>``) unless the dataset
asked for an object: the request's root is a class of the row's reference (``classes`` in the host's test plan; never
decided by capitalisation) or a handle; then the judge holds a handle whose methods, attributes, ``len``, ``iter``,
``[]`` and ``in`` are asked of the candidate (comparison, hashing and truth stay the judge's: identity). An iterator
the program returns is served lazily (:class:`RemoteIterator`; one per iterator of the program, whose read-ahead
items go to the program with it when the test hands it back). So ``f(x).startswith("a")`` is ``str.startswith`` on
the value ``f`` returned, even if ``f`` is a class. A test that passes without a single request into the program
fails (:data:`NO_CALL`); an argument that is not plain data makes the test weak only before the program answered
anything (after, it may hold the program's answers: the test fails).

What a one-process test does to the program is carried across (issue #45): while the test has replaced
``sys.stdout``/``sys.stderr`` (``redirect_stdout``), each request asks the candidate to capture what the program
prints during it, and that text is written to the test's stream before the answer is read; ``random.seed`` in the
test seeds the program's ``random`` too; ``unittest.main()`` runs the test's own ``TestCase`` classes, and cases the
test defines but never runs (``TestCase`` classes, ``def test_f():``) are run after it when it made no call.
Standard library only.
"""

import builtins
import os
import sys

if __name__ != "__main__":  # imported on the host (tests); in the sandbox these files are one text
    from .wire import WireReader, wire_json, wire_send


def run_judge(index, tests_fd, req_w, resp_r, report, codec, parse, frame_cap):
    """Run test ``index`` of the run (read from ``tests_fd``: ``(source, remote names, modules, classes)`` per test,
    marshalled by the host) and ``report(outcome)`` once (see the module docstring)."""
    try:
        source, remote, modules, classes, members = _read_test(tests_fd, index)
        code = compile(source, "<test>", "exec")
    except BaseException as err:
        report(["fail", f"test does not compile: {type(err).__name__}", 0])
        return
    encode, decode, unplain = codec
    reader = WireReader(resp_r, frame_cap)
    state = {"calls": 0, "disqualified": None, "weak": None}
    iterators = {}  # handle k → the RemoteIterator of the program's iterator k (one object, one buffer)
    exceptions = _EXCEPTIONS
    classes, members = frozenset(classes), frozenset(members)
    _type, _len, _int, _min, _isinstance = type, len, int, min, isinstance

    class Disqualified(BaseException):
        """The program's answer cannot count (not plain data, its process ended, it exited): the test fails."""

    class Weak(BaseException):
        """The test hands the program something that is not plain data."""

    def disqualify(reason):
        state["disqualified"] = state["disqualified"] or reason
        raise Disqualified(reason)

    def weak(reason):
        state["weak"] = state["weak"] or reason
        raise Weak(reason)

    def ref_of(value):
        """The target of an object of the program the judge holds (it crosses back as a reference), else None. An
        iterator the judge read ahead goes back with the items it holds (``["hb", k, items]``)."""
        kind = _type(value)
        if kind is RemoteRef:
            return object.__getattribute__(value, "_target")
        if kind is RemoteIterator:
            buffered = object.__getattribute__(value, "_buffer")
            target = object.__getattribute__(value, "_target")
            if not buffered:
                return target
            items = [encode(x, ref_of) for x in buffered]
            del buffered[:]  # handed over: the candidate serves them from now on, never this buffer a second time
            object.__setattr__(value, "_ended", False)  # ask again: the program may leave some of them unread
            return ["hb", target[1], items]
        return None

    def member(target, name):
        """A method or attribute of the program's object: only those the reference's classes define."""
        if name not in members:
            raise AttributeError(f"{name!r} is not a member of the reference's classes")
        return ["m", target, name]

    def wire_argument(value, shared):
        target = ref_of(value)
        if target is not None:
            return ["r", target]
        try:
            return ["v", encode(value, ref_of, shared)]
        except unplain as err:
            if state["calls"] or state["disqualified"]:  # the test's values may hold the program's answers
                disqualify(f"a value built from the program's answers cannot be sent to it: {err}")
            weak(f"a test argument is not plain data: {err}")

    def receive():
        try:
            frame = reader.read()
        except (ValueError, OSError, MemoryError) as err:
            disqualify(str(err) or type(err).__name__)
        if frame is None:
            disqualify("the program's process ended")
        try:
            return parse(frame)
        except ValueError as err:
            disqualify(str(err))

    def exchange(request):
        """Send one request and read its answer; while the test has redirected ``sys.stdout``/``sys.stderr``, what
        the program prints meanwhile is written to the test's stream first (the candidate's ``_Capture``)."""
        redirected = [sys.stdout is not streams[0], sys.stderr is not streams[1]]
        if redirected[0] or redirected[1]:
            request = ["capture", redirected, request]
        try:
            wire_send(req_w, request)
        except OSError:
            disqualify("the program's process ended")
        if redirected[0] or redirected[1]:
            printed = receive()
            if _type(printed) is not list or _len(printed) != 3 or printed[0] != "printed":
                disqualify("malformed answer")
            for text, stream, asked in zip(printed[1:], (sys.stdout, sys.stderr), redirected, strict=True):
                if asked and _type(text) is str:
                    stream.write(text)
                elif text is not None:
                    disqualify("malformed answer")
        return receive()

    def ask(request):
        """Send one request and read its answer (counted: the test evaluated the program's output)."""
        if state["disqualified"]:
            raise Disqualified(state["disqualified"])
        state["calls"] += 1  # counted when sent: a request the program never answered still reached it
        answer = exchange(request)
        kind = answer[0] if _type(answer) is list and answer and _type(answer[0]) is str else None
        if kind == "raise" and _len(answer) == 3 and _type(answer[1]) is str:
            if answer[1] not in exceptions:
                disqualify(f"program raised {answer[1][:60]}")
            try:
                error = exceptions[answer[1]](*decode(answer[2]))
            except BaseException:  # no arguments sent, or not ones this class takes
                error = exceptions[answer[1]]("raised by the program")
            raise error
        if kind == "error" and _len(answer) == 2:
            disqualify(str(answer[1])[:200])
        if kind is None:
            disqualify("malformed answer")
        return kind, answer

    def value_of(target, kind, answer, containers=None, write_back=None):
        """The value an answer carries: plain data, a lazy iterator, or a handle where the dataset asked for one."""
        if kind == "ok" and _len(answer) == 3:
            try:
                value = decode(answer[1])
            except unplain as err:
                disqualify(f"unserialisable: {err}")
            if containers is not None and _type(answer[2]) is list and _len(answer[2]) == _len(containers):
                if write_back == "always" or value is None:
                    _write_back(containers, answer[2])
            return value
        if kind == "iter" and _len(answer) == 2 and _type(answer[1]) is int and answer[1] >= 0:
            if answer[1] not in iterators:  # the same iterator of the program is the same object here
                iterators[answer[1]] = RemoteIterator(["h", answer[1]])
            return iterators[answer[1]]
        if kind == "obj" and _len(answer) == 3 and _type(answer[1]) is int and answer[1] >= 0:
            if _objects_allowed(target, classes):
                return RemoteRef(["h", answer[1]])
            disqualify(f"unserialisable: {str(answer[2])[:100]}")
        disqualify("malformed answer")

    def call(target, args, kwargs, write_back):
        shared = ({}, [])  # the mutable containers of the arguments (keyword ones too), numbered as first met
        request = ["call", target, [wire_argument(a, shared) for a in args]]
        request += [[[k, wire_argument(v, shared)] for k, v in kwargs.items()], write_back]
        kind, answer = ask(request)
        return value_of(target, kind, answer, shared[1] if write_back else None, write_back)

    def _write_back(containers, states):
        """Each container of the arguments takes, in place, the contents the program left in it (``states``: one
        per container, in the same numbering; a container inside another is the test's own object), so the test's
        aliases of a nested list see the change, as in Python. All or nothing: a state that does not decode, or one
        of another type, writes nothing (for that call, or for that container)."""
        known = [*containers]
        try:
            news = [decode(node, None, known, True) for node in states]
        except unplain:
            return
        for original, new in zip(containers, news, strict=True):
            kind = _type(new)
            if _type(original) is not kind or new is original:
                continue  # the test's own subclass, or not what was sent: left as it was
            if kind is list or kind is bytearray:
                original[:] = new
            elif kind is set or _isinstance(original, dict):  # dict, Counter, OrderedDict (order), defaultdict
                original.clear()
                original.update(new)
            else:  # a deque
                original.clear()
                original.extend(new)

    class RemoteRef:
        """A name of the program, or an object it returned: calls, attributes, ``len``, ``iter``, ``[]`` and ``in``
        are answered by the program; comparison, hashing and truth are the judge's own (identity, always true)."""

        __slots__ = ("_target",)

        def __init__(self, target):
            object.__setattr__(self, "_target", target)

        def __call__(self, *args, **kwargs):
            return call(object.__getattribute__(self, "_target"), args, kwargs, False)

        def __getattr__(self, attr):
            if attr.startswith("__"):
                raise AttributeError(attr)
            target = member(object.__getattribute__(self, "_target"), attr)
            kind, answer = ask(["get", target])
            return value_of(target, kind, answer)

        def __len__(self):
            member(None, "__len__")
            kind, answer = ask(["len", object.__getattribute__(self, "_target")])
            return value_of(None, kind, answer)

        def __iter__(self):
            target = object.__getattribute__(self, "_target")
            member(None, "__iter__")
            kind, answer = ask(["iter", target])
            value = value_of(target, kind, answer)
            return value if _type(value) is RemoteIterator else iter(value)

        def __getitem__(self, key):
            return call(member(object.__getattribute__(self, "_target"), "__getitem__"), (key,), {}, False)

        def __contains__(self, item):
            return bool(call(member(object.__getattribute__(self, "_target"), "__contains__"), (item,), {}, False))

        def __setattr__(self, attr, value):
            raise AttributeError("the program's objects cannot be changed by the test")

        def __repr__(self):
            return f"<the program's {_describe(object.__getattribute__(self, '_target'))}>"

    class RemoteIterator:
        """An iterator the program returned that is not plain data (a generator, possibly infinite): its items are
        fetched on demand, each item decoded as plain data: one at a time for the first 16 (a test that takes a few
        items of a generator whose next item is far away never asks for it), then in batches that double up to 256
        (the candidate stops a batch early after ~2 ms)."""

        __slots__ = ("_target", "_buffer", "_ended", "_batch", "_fetched")

        def __init__(self, target):
            object.__setattr__(self, "_target", target)
            object.__setattr__(self, "_buffer", [])
            object.__setattr__(self, "_ended", False)
            object.__setattr__(self, "_batch", 1)
            object.__setattr__(self, "_fetched", 0)

        def __iter__(self):
            return self

        def __next__(self):
            get = object.__getattribute__
            buffer = get(self, "_buffer")
            if not buffer and not get(self, "_ended"):
                batch = get(self, "_batch")
                if get(self, "_fetched") >= 16:
                    object.__setattr__(self, "_batch", _min(2 * batch, 256))
                kind, answer = ask(["next", get(self, "_target"), batch])
                if kind != "items" or _len(answer) != 3 or _type(answer[1]) is not list or _len(answer[1]) > batch:
                    disqualify("malformed answer")
                try:
                    buffer.extend(decode(node) for node in answer[1])
                except unplain as err:
                    disqualify(f"unserialisable: {err}")
                object.__setattr__(self, "_ended", answer[2] is True)
                object.__setattr__(self, "_fetched", get(self, "_fetched") + _len(answer[1]))
            if not buffer:
                raise StopIteration
            return buffer.pop(0)

        def __repr__(self):
            return f"<the program's iterator {_describe(object.__getattribute__(self, '_target'))}>"

    def statement_call(function, *args, **kwargs):
        """A call made as a statement: its mutable arguments get the program's changes written back (host rewrite;
        any callable: the write-back happens only where it is in fact the program's)."""
        if type(function) is RemoteRef:
            return call(object.__getattribute__(function, "_target"), args, kwargs, "always")
        return function(*args, **kwargs)

    def mutating_call(function, *args, **kwargs):
        """A call inside an expression whose variable argument the statement reads only there: written back only
        when it returned ``None`` (an in-place function; host rewrite)."""
        if type(function) is RemoteRef:
            return call(object.__getattribute__(function, "_target"), args, kwargs, "if_none")
        return function(*args, **kwargs)

    hello = None
    try:
        hello = receive()
    except Disqualified as err:
        report(["fail", str(err), 0])
        return
    if type(hello) is list and len(hello) == 2 and hello[0] == "program_error":
        report(["program_error", str(hello[1])[:60], 0])
        return
    if hello != ["ready"]:
        report(["fail", "malformed answer", 0])
        return

    def seed_program(a=None, version=2):
        """``random.seed`` in the test seeds the program's ``random`` too (issue #45): a test that seeds and then
        reads the program's draws sees what one process would give (not counted as a call; a seed that is not plain
        data seeds the judge only)."""
        judge_seed(a, version)
        if state["disqualified"]:
            return
        try:
            request = ["seed", encode(a), version]
        except unplain:
            return
        answer = exchange(request)
        if answer != ["ok", None, None]:
            disqualify("malformed answer")

    streams = (sys.stdout, sys.stderr)  # the judge's own: a test that replaces one asks for the program's output
    if "random" in source:  # a test that never names the module cannot seed it: no import, no patch
        import random

        judge_seed, random.seed = random.seed, seed_program
    ns = {"__name__": "__main__", "__builtins__": builtins}
    ns.update(__loo_statement_call__=statement_call, __loo_mutating_call__=mutating_call)
    if "unittest" in source:  # the test's ``unittest.main()`` runs the test's own cases, never the runner's module
        import unittest

        unittest.main = lambda *args, **kwargs: _run_test_cases(ns, unittest)
    for name in modules:
        try:
            ns[name] = __import__(name)
        except ImportError:
            pass
    for name in remote:
        ns[name] = RemoteRef(["n", name])
    try:
        exec(code, ns)
        if not state["calls"]:  # cases the test defines and never ran (``class T(TestCase)``, ``def test_f()``)
            _run_defined_tests(ns, code)
        outcome = ["pass"]
    except Weak as err:
        outcome = ["weak", str(err)]
    except Disqualified as err:
        outcome = ["fail", str(err)]
    except AssertionError:
        outcome = ["fail", "AssertionError"]
    except BaseException as err:
        outcome = ["fail", type(err).__name__]
    if state["weak"] and not state["disqualified"]:  # swallowed by the test's own ``except``: still not judged
        outcome = ["weak", state["weak"]]
    elif state["disqualified"]:  # swallowed by the test's own ``except``: the program's answer did not count
        outcome = ["fail", state["disqualified"]]
    elif outcome[0] == "pass" and not state["calls"]:  # nothing of the program was evaluated: proves nothing
        outcome = ["fail", NO_CALL]
    report([*outcome, state["calls"]])


#: The reason of a test that passed without asking the program anything.
NO_CALL = "the test made no call into the program"

#: Built-in exception classes by name: what the program raised is raised in the test as the same built-in class,
#: with its arguments. Not ``StopIteration``/``StopAsyncIteration``: raised from a function that ``map`` or a loop
#: calls, they would end the test's iteration early (``all(map(f, xs))`` would pass with no answer checked).
_EXCEPTIONS = {
    n: c
    for n, c in vars(builtins).items()
    if isinstance(c, type) and issubclass(c, Exception) and not issubclass(c, (StopIteration, StopAsyncIteration))
}


def _run_test_cases(ns, unittest):
    """``unittest.main()`` as the test means it: the ``TestCase`` classes of the test's own namespace, run here (its
    arguments, ``argv``, ``exit``, are the runner's to ignore); a failure, an error or no test at all fails the test.
    Returns on success (``exit=False``'s behaviour) instead of raising ``SystemExit(0)``."""
    loader = unittest.TestLoader()
    suite = unittest.TestSuite(loader.loadTestsFromTestCase(case) for case in _test_case_classes(ns, unittest))
    result = unittest.TextTestRunner(stream=sys.stderr, verbosity=0).run(suite)
    if not result.testsRun:
        raise AssertionError("unittest.main(): the test defines no test case")
    if not result.wasSuccessful():
        raise AssertionError(f"unittest: {len(result.failures)} failures, {len(result.errors)} errors")


def _run_defined_tests(ns, code):
    """A test that defines cases and never runs them, as pytest or unittest would find them: its own functions named
    ``test*`` that take no argument, called in order, then its ``TestCase`` classes (:func:`_run_test_cases`). Only
    after a test made no call into the program (a test that ran its cases already is not run twice)."""
    functions = [
        value
        for name, value in list(ns.items())
        if name.startswith("test")
        and type(value) is type(_run_defined_tests)
        and value.__code__.co_filename == code.co_filename
        and not value.__code__.co_argcount
        and not value.__code__.co_kwonlyargcount
    ]
    for function in functions:
        function()
    unittest = sys.modules.get("unittest")
    if unittest is not None and _test_case_classes(ns, unittest):
        _run_test_cases(ns, unittest)


def _test_case_classes(ns, unittest):
    """The ``TestCase`` classes the test itself defines (its namespace is module ``__main__``; not imported ones)."""
    return [
        v
        for v in list(ns.values())
        if isinstance(v, type) and issubclass(v, unittest.TestCase) and v.__module__ == "__main__"
    ]


def _read_test(fd, index):
    """Test ``index`` from the host's marshalled list of tests (the same interpreter wrote it)."""
    import marshal

    data, size = b"", os.fstat(fd).st_size
    while len(data) < size:
        chunk = os.pread(fd, size - len(data), len(data))
        if not chunk:
            break
        data += chunk
    return marshal.loads(data)[index]


def _objects_allowed(target, classes):
    """Whether the dataset asked for an object of the program here: the request's root is a handle, or a class of the
    dataset's reference solution (``classes``, from the host's test plan; never the program's capitalisation)."""
    while target is not None and target[0] == "m":
        target = target[1]
    return target is not None and (target[0] == "h" or (target[0] == "n" and target[1] in classes))


def _describe(target):
    if target[0] == "n":
        return target[1]
    if target[0] == "h":
        return f"object #{target[1]}"
    return f"{_describe(target[1])}.{target[2]}"


def judge_report_writer(fd):
    """``report(outcome)``: the outcome as one JSON text on ``fd`` (the runner forwards it to the host)."""

    def report(outcome):
        data = wire_json(outcome).encode("utf-8", "surrogatepass")
        while data:
            data = data[os.write(fd, data) :]

    return report
