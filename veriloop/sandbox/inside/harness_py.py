"""Python tests judged where the candidate cannot reach; copied beside the runner and run inside the sandbox.

Standard library only. `main.py` calls `main(argv)` in the step process, which becomes the *judge*:

1. it makes itself non-dumpable (so no other process of the job can ptrace it or open its /proc/PID/{mem,fd}),
   then forks the *candidate* process before it has read anything of the tests. The candidate closes every
   descriptor but its stdout/stderr and two pipes, loads solution.py and then only answers calls.
2. The judge drops the work dir from sys.path, moves to /, reads the tests from its stdin (they are on no disk the
   candidate sees) and runs them with a proxy for each name the solution defines: calling it runs the call in the
   candidate process, and the value comes back as plain data (None, bool, int, float, str, bytes, bytearray, list,
   tuple, dict, set, frozenset; anything else is an opaque handle that fails any test that looks at it, naming its
   type). The arguments go over as copies: the test's own objects change only through a call whose value the test
   drops (`f(xs)` as a statement, a test of an in-place function), never through one an assert compares.
3. Each test's outcome goes to fd 4, a pipe the candidate never held, read by the runner; a last
   `{"complete": true}` line ends it.

HumanEval style (`def check(candidate): assert ...` plus an entry point) and MBPP style (top-level asserts) both
work: every statement that runs an assert is one test, which passes only when one of its asserts ran; the other
statements are set-up run in order. A test file with no test, or with a `check` never called with the function to
test, gives no verdict (TestFileError; the host refuses such a file before any job runs). The task's own code (the
prompt, less the entry point) runs in the judge too, and every name it binds is the task's, not the candidate's.
`program` mode runs a whole test program (TransCoder's Python scripts) the same way, with its stdout captured by the
judge; there its reference `f_gold` is called with the arguments as they were before a call of the candidate's
changed them in place.
"""

# Raw os calls on purpose (fds, fork, pipes inside the sandbox):
# ruff: noqa: PTH109, SIM105
from __future__ import annotations

import ast
import builtins
import json
import os
import sys
import traceback
from typing import Any

SOLUTION = "solution.py"
TESTS = "tests.py"
HELPERS = "task.py"
STDIO = "_veriloop_stdio"
"""The judge's name for running the solution as `__main__` on a stdin (stdin/stdout tasks); ref 0 in the candidate."""
RESULTS_FD = 4
MAX_MESSAGE = 64 << 20
PR_SET_DUMPABLE = 4
PLAIN_TYPES = (
    "None, bool, int, float, complex, str, bytes, bytearray, list, tuple, dict, set, frozenset or a collections dict"
)
SMALL_INT = 1 << 53


# --------------------------------------------------------------------------- the test file

CHECK = "check"
RAN = "_veriloop_held"
"""Wraps each assert's condition (in the judge): a test passes only when one of its asserts ran and none failed,
even where the test itself caught the AssertionError."""
EFFECT = "_veriloop_effect"
"""Wraps each call whose value the test drops (`f(xs)` as a statement): only there do in-place changes come back."""
DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


class TestFileError(ValueError):
    """The test file can give no verdict whatever the candidate does: it runs no test (no assert, or a `check` that
    is never called with the function to test), so judging it would turn zero tests into `passed`."""

    __test__ = False  # not a pytest class


def _outside_definitions(nodes: list[ast.stmt]) -> Any:
    """Every node of `nodes` except what lies inside the functions, lambdas and classes they define (code that runs
    only when called)."""
    todo: list[ast.AST] = list(nodes)
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, DEFINITIONS):
            todo.extend(ast.iter_child_nodes(node))


def _statements(block: list[ast.stmt], definitions: bool = True) -> Any:
    """Every statement of `block` and of the blocks inside it (into function and class bodies when `definitions`),
    without walking expressions: a test file's megabyte literals cost nothing here."""
    todo = list(block)
    while todo:
        statement = todo.pop()
        yield statement
        if isinstance(statement, DEFINITIONS) and not definitions:
            continue
        for field in ("body", "orelse", "finalbody"):
            inner = getattr(statement, field, None)
            if isinstance(inner, list):
                todo.extend(inner)
        for part in [*getattr(statement, "handlers", ()), *getattr(statement, "cases", ())]:
            todo.extend(part.body)


def find_check(tree: ast.Module) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    """The top-level `check` that takes the candidate (the last definition: it is the one a call would run)."""
    found = None
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == CHECK:
            found = node if node.args.posonlyargs or node.args.args else None
    return found


def _parameter(check: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    return [*check.args.posonlyargs, *check.args.args][0].arg


def check_call_target(tree: ast.Module, parameter: str = "candidate") -> str | None:
    """The name passed to a call of `check` outside any function (`check(f)`, `check(candidate=f)`, also inside an
    `if` or a loop): the entry point of a test file judged without one."""
    for node in _outside_definitions(tree.body):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == CHECK:
            given = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == parameter), None)
            if isinstance(given, ast.Name):
                return given.id
    return None


def is_check_call(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.Expr)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and node.value.func.id == CHECK
    )


def _asserting_functions(tree: ast.Module) -> set[str]:
    """Names of the functions the test file defines that run an assert when called, directly or through another."""
    functions = [node for node in _statements(tree.body) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]
    found: set[str] = set()
    while True:
        more = {
            function.name
            for function in functions
            if function.name not in found and any(_asserts(node, found) for node in function.body)
        }
        if not more:
            return found
        found |= more


def _asserts(statement: ast.stmt, functions: set[str]) -> bool:
    """Whether running `statement` runs an assert: one of its own, or a call of a function of `functions`."""
    if isinstance(statement, DEFINITIONS):
        return False
    if any(isinstance(node, ast.Assert) for node in _statements([statement], definitions=False)):
        return True
    return bool(functions) and any(
        isinstance(node, ast.Name) and node.id in functions for node in _outside_definitions([statement])
    )


class Plan:
    """How the judge runs a test file: `setup` statements first, then `body`, where the statements at `tests` are
    the tests (each reported); `parameter` is bound to the solution's `entry` (HumanEval's `check(candidate)`)."""

    __slots__ = ("body", "entry", "parameter", "setup", "tests")

    def __init__(
        self, setup: list[ast.stmt], body: list[ast.stmt], tests: list[int], parameter: str | None, entry: str | None
    ) -> None:
        self.setup, self.body, self.tests, self.parameter, self.entry = setup, body, tests, parameter, entry


def plan(tests: str, entry_point: str | None) -> Plan:
    """The plan of a test file, or TestFileError when it runs no test.

    A test is a statement of the body (`check`'s, else the file's) that runs an assert when it runs; the others are
    set-up. A `check` that is never called with the function to test (and no entry point given) is an error, not a
    file of zero tests, as is one the judge cannot run as its statements (a generator, a coroutine, `return` inside
    a block: calling it would run no assert)."""
    tree = ast.parse(tests, TESTS)
    check = find_check(tree)
    if check is None:
        setup: list[ast.stmt] = []
        body, parameter, entry = list(tree.body), None, None
    else:
        parameter = _parameter(check)
        entry = entry_point or check_call_target(tree, parameter)
        if not entry:
            raise TestFileError(
                f"the tests define {CHECK}({parameter}) but never call it with the function to test, and no entry "
                "point was given: name the function (entry_point, --entry-point) or end the tests with "
                f"{CHECK}(<function>)"
            )
        if isinstance(check, ast.AsyncFunctionDef):
            raise TestFileError(f"the tests' {CHECK} is a coroutine function: calling it runs none of its asserts")
        setup = [node for node in tree.body if not is_check_call(node)]
        body = []
        for node in check.body:  # statements after a `return` of check's own body never run
            if isinstance(node, ast.Return):
                break
            body.append(node)
        for part in _outside_definitions(body):
            if isinstance(part, ast.Yield | ast.YieldFrom | ast.Await | ast.Return | ast.Nonlocal):
                raise TestFileError(
                    f"the tests' {CHECK} has a {type(part).__name__.lower()} on line {part.lineno}, which the judge "
                    f"cannot run as {CHECK}'s statements (as a generator or a coroutine it would run no assert)"
                )
    for part in _statements(tree.body):
        if isinstance(part, ast.Assert) and isinstance(part.test, ast.Tuple) and part.test.elts:
            raise TestFileError(
                f"the assert on line {part.lineno} tests a tuple, which is always true: `assert (x, message)` "
                "passes any program (write `assert x, message`)"
            )
    functions = _asserting_functions(tree)
    indexes = [index for index, node in enumerate(body) if _asserts(node, functions)]
    if not indexes:
        where = f"{CHECK}({parameter})" if check is not None else "the tests"
        raise TestFileError(f"{where} hold no assert that runs: there is no test to pass")
    return Plan(setup, body, indexes, parameter, entry)


def count_tests(tests: str, entry_point: str | None = None) -> int:
    """How many tests the harness will report for this test file (the host checks the count); TestFileError (a
    ValueError) when it has none, SyntaxError when it does not parse."""
    return len(plan(tests, entry_point).tests)


def _instrument(block: list[ast.stmt]) -> None:
    """The judge's additions to the trusted test code, made in place: each assert's condition goes through RAN
    (`assert RAN(cond), message`: evaluated once, as before, and counted), and calls whose value is dropped are made
    through EFFECT (the test uses what they do to their arguments, not what they return). Only statement lists are
    walked (asserts and expression statements live nowhere else): a test program's literals of megabytes stay fast."""
    for statement in _statements(block):
        if isinstance(statement, ast.Assert):
            test = statement.test
            statement.test = _located(ast.Call(_located(ast.Name(RAN, ast.Load()), test), [test], []), test)
        elif isinstance(statement, ast.Expr):
            value = statement.value
            if isinstance(value, ast.ListComp | ast.SetComp):  # `[f(row) for row in m]`, its list dropped
                value.elt = _effect_call(value.elt)
            else:
                statement.value = _effect_call(value)


def _located(node: ast.expr, where: ast.expr) -> ast.expr:
    return ast.copy_location(node, where)


def _effect_call(value: ast.expr) -> ast.expr:
    if not isinstance(value, ast.Call):
        return value
    wrapped = ast.Call(_located(ast.Name(EFFECT, ast.Load()), value.func), [value.func, *value.args], value.keywords)
    return _located(wrapped, value)


def instrument(statement: ast.stmt) -> ast.Module:
    """One statement of the test file as a module the judge runs, with RAN and EFFECT calls added."""
    _instrument([statement])
    return ast.Module([statement], [])


def _bound_names(targets: list[ast.AST]) -> set[str]:
    """Module-level names that `targets` (statements) bind or delete, not counting function and class bodies, plus
    the names any function among them declares `global`."""
    names: set[str] = set()
    for node in _outside_definitions(targets):  # type: ignore[arg-type]
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            names.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.split(".")[0])
        elif isinstance(node, ast.ExceptHandler | ast.MatchAs | ast.MatchStar) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            names.add(node.rest)
    for node in ast.walk(ast.Module(list(targets), [])):  # type: ignore[arg-type]
        if isinstance(node, ast.Global):
            names.update(node.names)
    names.discard("*")
    return names


def _is_entry(node: ast.stmt, entry_point: str | None) -> bool:
    return isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == entry_point


def helper_nodes(source: str, entry_point: str | None) -> list[ast.stmt]:
    """The task's own code (the prompt) the judge runs itself: all of it, less the entry point's definition, which is
    the candidate's to write."""
    return [node for node in ast.parse(source, HELPERS).body if not _is_entry(node, entry_point)]


def helper_names(source: str, entry_point: str | None) -> set[str]:
    """Every name the task's code binds at module level (constants, assignments of any form, imports, functions,
    classes, deletions, `global`s), less the entry point: the judge never takes these from the candidate."""
    names = _bound_names(list(helper_nodes(source, entry_point)))
    names.discard(entry_point or "")
    return names


# --------------------------------------------------------------------------- plain data on the wire


def encode(value: Any, refs: dict[int, Any] | None) -> Any:
    """A JSON-able form of a plain value; other objects become handles (kept in `refs`) or, without refs, an error.

    Only exact built-in types count (a subclass of int or str may compare or print as it likes, so it is not plain).
    """
    kind = type(value)
    if value is None or kind is bool or kind is str or kind is float:
        return value
    if kind is int:
        return value if -SMALL_INT < value < SMALL_INT else {"i": hex(value)}
    if kind is list:
        return [encode(item, refs) for item in value]
    if kind is tuple:
        return {"t": [encode(item, refs) for item in value]}
    if kind is dict:
        return {"d": [[encode(key, refs), encode(item, refs)] for key, item in value.items()]}
    if kind is set:
        return {"s": [encode(item, refs) for item in value]}
    if kind is frozenset:
        return {"z": [encode(item, refs) for item in value]}
    if kind is bytes:
        return {"b": value.hex()}
    if kind is bytearray:
        return {"B": value.hex()}
    if kind in _COLLECTIONS:  # stdlib dict types the judge rebuilds itself (their comparisons are the stdlib's)
        return {_COLLECTIONS[kind]: [[encode(key, refs), encode(item, refs)] for key, item in value.items()]}
    if kind is complex:
        return {"c": [value.real, value.imag]}
    if kind is Remote or kind is Proxy:
        return {"r": value.ref}
    if refs is None:
        raise TypeError(f"a {_type_name(value)} cannot be passed to the candidate (only {PLAIN_TYPES})")
    ref = len(refs) + 1
    refs[ref] = value
    return {"r": ref, "y": _type_name(value)}


def _collections() -> dict[type, str]:
    import collections

    return {collections.Counter: "C", collections.OrderedDict: "O", collections.defaultdict: "D"}


_COLLECTIONS = _collections()
MUTABLE = (list, dict, set, bytearray, *_COLLECTIONS)
"""What an effect call's changes to its arguments are carried back into (`_sync`)."""


def _type_name(value: Any) -> str:
    kind = type(value)
    module = getattr(kind, "__module__", "")
    name = getattr(kind, "__qualname__", "?")
    return name if module in ("builtins", "__solution__", "__main__", None, "") else f"{module}.{name}"


class ProtocolError(Exception):
    """The candidate's process sent something that is not a well-formed answer."""


def decode(data: Any) -> Any:
    """The judge's side: genuine built-in objects from the wire, or ProtocolError; handles become Remote."""
    kind = type(data)
    if data is None or kind is bool or kind is str or kind is int or kind is float:
        return data
    if kind is list:
        return [decode(item) for item in data]
    if kind is not dict or len(data) not in (1, 2):
        raise ProtocolError(f"unexpected {kind.__name__} on the wire")
    if "r" in data:
        ref, name = data.get("r"), data.get("y", "object")
        if type(ref) is not int or type(name) is not str:
            raise ProtocolError("bad handle")
        return Remote(ref, name[:200])
    if len(data) != 1:
        raise ProtocolError("bad tagged value")
    ((tag, body),) = data.items()
    if tag == "i" and type(body) is str:
        return int(body, 16)
    if tag == "b" and type(body) is str:
        return bytes.fromhex(body)
    if tag == "B" and type(body) is str:
        return bytearray.fromhex(body)
    if type(body) is not list:
        raise ProtocolError(f"bad tagged value {tag!r}")
    if tag == "t":
        return tuple(decode(item) for item in body)
    if tag == "s":
        return {decode(item) for item in body}
    if tag == "z":
        return frozenset(decode(item) for item in body)
    if tag in ("d", "C", "O", "D"):
        pairs = [item for item in body if type(item) is list and len(item) == 2]
        if len(pairs) != len(body):
            raise ProtocolError("bad dict item")
        items = {decode(key): decode(item) for key, item in pairs}
        if tag == "d":
            return items
        kind = next(kind for kind, name in _COLLECTIONS.items() if name == tag)
        return kind(None, items) if tag == "D" else kind(items)
    if tag == "c" and len(body) == 2 and all(type(part) in (int, float) for part in body):
        return complex(body[0], body[1])
    raise ProtocolError(f"unknown tag {tag!r}")


class Remote:
    """An object that stayed in the candidate's process: it may be passed back in calls, and nothing else."""

    __slots__ = ("name", "ref")

    def __init__(self, ref: int, name: str) -> None:
        self.ref = ref
        self.name = name

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"the candidate returned a {self.name}, which is not plain data (only {PLAIN_TYPES})")

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _refuse
    __hash__ = __bool__ = __len__ = __iter__ = __contains__ = __getitem__ = _refuse
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __float__ = __int__ = __index__ = _refuse

    def __getattr__(self, name: str) -> Any:
        return self._refuse()

    def __repr__(self) -> str:
        return f"<the candidate's {self.name}>"

    __str__ = __repr__

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _channel.call(self.ref, args, kwargs)


def _send(fd: int, message: Any) -> None:
    view = memoryview((json.dumps(message, separators=(",", ":")) + "\n").encode())
    while view:
        view = view[os.write(fd, view) :]


class Lines:
    """Newline-ended messages from a pipe, each at most MAX_MESSAGE bytes."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.buffer = bytearray()

    def read(self) -> bytes | None:
        while True:
            end = self.buffer.find(b"\n")
            if end >= 0:
                line = bytes(self.buffer[:end])
                del self.buffer[: end + 1]
                return line
            if len(self.buffer) > MAX_MESSAGE:
                raise ProtocolError(f"an answer over {MAX_MESSAGE >> 20} MiB")
            chunk = os.read(self.fd, 1 << 20)
            if not chunk:
                return None
            self.buffer += chunk


# --------------------------------------------------------------------------- the candidate's process


def candidate(requests: int, answers: int) -> None:
    """In the forked child: load the solution, report its names, then answer calls until the judge closes the pipe."""
    code = 1
    try:
        null = os.open("/dev/null", os.O_RDWR)
        requests, answers = os.dup(requests), os.dup(answers)  # above 4, before 3 and 4 are reused
        os.dup2(null, 0)
        os.dup2(requests, 3)
        os.dup2(answers, 4)
        os.closerange(5, 1 << 16)  # the judge's verdict pipe, the runner's status pipe and all the rest
        code = _serve(3, 4)
    except BaseException:
        try:
            traceback.print_exc()
        except BaseException:
            pass
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        os._exit(code)


def _serve(requests: int, answers: int) -> int:
    try:
        with open(SOLUTION) as handle:
            source = handle.read()
        compiled = compile(source, SOLUTION, "exec")
    except SyntaxError:
        traceback.print_exc(limit=0)
        _send(answers, {"syntax_error": True})
        return 1
    namespace: dict[str, Any] = {"__name__": "__solution__", "__builtins__": builtins}
    exec(compiled, namespace)  # an exception here is the program's own runtime error (traceback on stderr)
    refs: dict[int, Any] = {0: _as_main(compiled)}
    names: dict[str, Any] = {}
    for name, value in list(namespace.items()):
        if name.startswith("__"):
            continue
        if isinstance(value, type(sys)):
            names[name] = {"m": getattr(value, "__name__", name)}
        elif callable(value):
            refs[len(refs) + 1] = value
            names[name] = {"f": len(refs)}
        else:
            try:
                names[name] = {"v": encode(value, None)}
            except (TypeError, ValueError, RecursionError):
                continue
    sys.stdout.flush()
    _send(answers, {"ready": names})
    lines = Lines(requests)
    while True:
        line = lines.read()
        if line is None:
            return 0
        request = json.loads(line)
        answer = _answer(request, refs)
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        _send(answers, answer)


def _as_main(compiled: Any) -> Any:
    """Runs the whole program again as `__main__` with a case's stdin, in the candidate's process, and returns
    what it printed (lines right-stripped, trailing blank lines dropped): plain data the judge compares."""

    def run(stdin: str) -> str:
        import io

        out = io.StringIO()
        saved = sys.stdin, sys.stdout
        sys.stdin, sys.stdout = io.StringIO(stdin), out
        try:
            exec(compiled, {"__name__": "__main__", "__builtins__": builtins})
        except SystemExit:
            pass
        finally:
            sys.stdin, sys.stdout = saved
        return "\n".join(line.rstrip() for line in out.getvalue().rstrip().splitlines())

    return run


def _answer(request: dict[str, Any], refs: dict[int, Any]) -> dict[str, Any]:
    def local(value: Any) -> Any:  # the judge's encoding back into objects, handles into this process's objects
        kind = type(value)
        if kind is list:
            return [local(item) for item in value]
        if kind is dict:
            if "r" in value:
                return refs[value["r"]]
            ((tag, body),) = value.items()
            if tag == "i":
                return int(body, 16)
            if tag == "b":
                return bytes.fromhex(body)
            if tag == "B":
                return bytearray.fromhex(body)
            if tag == "c":
                return complex(*body)
            items = [local(item) for item in body]
            if tag == "t":
                return tuple(items)
            if tag == "s":
                return set(items)
            if tag == "z":
                return frozenset(items)
            pairs = {key: item for key, item in (local(pair) for pair in body)}
            kind = next((kind for kind, name in _COLLECTIONS.items() if name == tag), dict)
            return kind(None, pairs) if tag == "D" else kind(pairs)
        return value

    target = refs[request["f"]]
    args = local(request["a"])
    kwargs = {key: local(item) for key, item in request["k"]}
    try:
        result = target(*args, **kwargs)
    except Exception as exc:
        trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-6:])
        return {"e": [type(exc).__name__, str(exc)[:4000], trace[-8000:]]}
    try:
        answer = {"v": encode(result, refs)}
        if request.get("x") is True:  # an effect call: the arguments as the call left them go back (sorts, fills)
            after = [encode(arg, refs) for arg in args]
            if after != request["a"]:
                answer["m"] = after
            named = [[key, encode(item, refs)] for key, item in kwargs.items()]
            if named != request["k"]:
                answer["mk"] = named
        return answer
    except (RecursionError, ValueError) as exc:
        return {"e": ["TypeError", f"the returned {_type_name(result)} cannot be sent: {exc}", ""]}


# --------------------------------------------------------------------------- the judge


class CandidateGone(BaseException):
    """The candidate's process ended or broke the protocol: no later test can run (not catchable by tests)."""


class Channel:
    """The judge's end of the two pipes to the candidate's process."""

    def __init__(self, pid: int, requests: int, answers: int) -> None:
        self.pid = pid
        self.requests = requests
        self.lines = Lines(answers)
        self.status: int | None = None
        self.broken = ""
        self.calls = 0
        """Calls made into the candidate's process: tests that never made one said nothing of the program."""
        self.originals: dict[int, tuple[Any, Any]] | None = None
        """id -> (an argument the candidate changed in place, a copy from before), where kept (`program` mode)."""

    def receive(self) -> dict[str, Any]:
        if self.broken:
            raise CandidateGone(self.broken)
        try:
            line = self.lines.read()
            if line is None:
                raise CandidateGone(self._ended())
            message = json.loads(line)
            if type(message) is not dict:
                raise ProtocolError("an answer that is not an object")
            return message
        except (ProtocolError, ValueError, RecursionError) as exc:
            raise self._break(exc) from None

    def call(self, target: int, args: tuple[Any, ...], kwargs: dict[str, Any], effect: bool = False) -> Any:
        """Run a call in the candidate's process. The arguments travel as copies, so nothing the candidate does to
        them reaches the test's objects, except for an `effect` call (one whose value the test drops): there its
        changes to list, dict, set and bytearray arguments are made to the test's objects."""
        request = {"f": target, "a": encode(list(args), None), "k": [[k, encode(v, None)] for k, v in kwargs.items()]}
        if effect:
            request["x"] = True
        if self.broken:
            raise CandidateGone(self.broken)
        self.calls += 1
        try:
            _send(self.requests, request)
        except OSError:
            raise CandidateGone(self._ended()) from None
        answer = self.receive()
        if "v" in answer and set(answer) <= ({"v", "m", "mk"} if effect else {"v"}):
            try:
                if "m" in answer:
                    changed = decode(answer["m"])
                    if type(changed) is not list or len(changed) != len(args):
                        raise ProtocolError("bad changed arguments")
                    for old, new in zip(args, changed, strict=True):
                        self._keep_original(old)
                        _sync(old, new)
                if "mk" in answer:
                    named = decode(answer["mk"])
                    if type(named) is not list or any(type(p) is not list or len(p) != 2 for p in named):
                        raise ProtocolError("bad changed keyword arguments")
                    for key, new in named:
                        if type(key) is not str or key not in kwargs:
                            raise ProtocolError("a changed keyword argument that was not passed")
                        self._keep_original(kwargs[key])
                        _sync(kwargs[key], new)
                return decode(answer["v"])
            except TypeError as exc:  # a handle inside a set or a dict key: not plain data
                raise TypeError(str(exc)) from None
            except (ProtocolError, ValueError, RecursionError) as exc:
                raise self._break(exc) from None
        error = answer.get("e")
        if len(answer) == 1 and type(error) is list and len(error) == 3 and all(type(e) is str for e in error):
            raise _exception(*error)
        raise self._break(ProtocolError("neither a value nor an exception"))

    def _keep_original(self, value: Any) -> None:
        if self.originals is not None and type(value) in MUTABLE and id(value) not in self.originals:
            import copy

            self.originals[id(value)] = (value, copy.deepcopy(value))

    def original(self, value: Any) -> Any:
        """A fresh copy of `value` as it was before the candidate changed it, or `value` itself."""
        kept = (self.originals or {}).get(id(value))
        if kept is None or kept[0] is not value:
            return value
        import copy

        return copy.deepcopy(kept[1])

    def _break(self, exc: BaseException) -> CandidateGone:
        self.broken = f"the candidate's process sent an unreadable answer ({str(exc)[:200]})"
        self.kill()
        return CandidateGone(self.broken)

    def kill(self) -> None:
        try:
            os.kill(self.pid, 9)
        except OSError:
            pass

    def wait(self) -> int:
        """The candidate's wait status (it is killed first when still running)."""
        if self.status is None:
            self.kill()
            self.status = _wait(self.pid)
        return self.status

    def _ended(self) -> str:
        self.status = _wait(self.pid)
        if os.WIFSIGNALED(self.status):
            self.broken = f"the candidate's process was killed by signal {os.WTERMSIG(self.status)}"
        else:
            self.broken = f"the candidate's process exited with code {os.WEXITSTATUS(self.status)}"
        return self.broken


def _sync(old: Any, new: Any) -> None:
    """Carry an in-place change of an effect call's argument (a list, dict, set, bytearray or stdlib dict) over to
    the test's object (inner identities kept)."""
    if type(old) is not type(new) or type(old) not in MUTABLE:
        return
    if type(old) is bytearray:
        old[:] = new
    elif type(old) is list and len(old) == len(new):
        for index, (inner_old, inner_new) in enumerate(zip(old, new, strict=True)):
            if type(inner_old) is type(inner_new) and type(inner_old) in MUTABLE:
                _sync(inner_old, inner_new)
            else:
                old[index] = inner_new
    elif type(old) is list:
        old[:] = new
    else:
        old.clear()
        old.update(new)


def _wait(pid: int) -> int:
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except InterruptedError:
            continue
        except ChildProcessError:
            return 0


class CandidateRaised(Exception):
    """An exception the candidate's function raised whose type is not a built-in one, or is one of ITERATION_ENDS."""


ITERATION_ENDS = frozenset({"StopIteration", "StopAsyncIteration"})
"""Raised as themselves, these would end the judge's iteration quietly (`all(map(candidate, cases))` is True when
the first call raises StopIteration), so they come back as CandidateRaised, which fails the test."""


def _exception(name: str, message: str, trace: str) -> BaseException:
    kind = getattr(builtins, name, None)
    exc: BaseException
    if (
        isinstance(kind, type)
        and issubclass(kind, Exception)
        and kind.__module__ == "builtins"
        and name not in ITERATION_ENDS
    ):
        try:
            exc = kind(message)
        except Exception:
            exc = CandidateRaised(f"{name}: {message}")
    else:
        exc = CandidateRaised(f"{name}: {message}")
    exc._veriloop = True  # type: ignore[attr-defined]
    exc._veriloop_trace = trace  # type: ignore[attr-defined]
    return exc


class Proxy:
    """Stands for one of the solution's functions in the judge: calls run in the candidate's process."""

    __slots__ = ("name", "ref")

    def __init__(self, ref: int, name: str) -> None:
        self.ref = ref
        self.name = name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return _channel.call(self.ref, args, kwargs)

    def __repr__(self) -> str:
        return f"<the candidate's {self.name}>"


_channel: Channel


class Results:
    """The verdict pipe (fd 4): one JSON line per record, written as soon as it is known."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def add(self, record: dict[str, Any]) -> None:
        _send(self.fd, record)


def _prctl(option: int, value: int) -> None:
    import ctypes

    if ctypes.CDLL(None, use_errno=True).prctl(option, ctypes.c_ulong(value), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl")


def _status(word: str) -> None:
    try:
        os.write(3, f"{word}\n".encode())
    except OSError:
        pass


def _trusted_path(work: str) -> None:
    """Nothing the candidate can write may be imported by the judge: drop the work dir, /tmp and ''."""
    work = os.path.realpath(work)

    def writable(path: str) -> bool:
        real = os.path.realpath(path or ".")
        return any(real == root or real.startswith(root + os.sep) for root in (work, "/tmp", "/dev/shm"))

    sys.path[:] = [path for path in sys.path if path and not writable(path)]
    sys.path_importer_cache.clear()


def _site_path() -> None:
    """Installed packages on sys.path as in the runner's own Python steps (a fresh judge starts without `site`)."""
    import importlib

    try:
        runner = importlib.import_module("runner")
    except ImportError:
        return
    sys.path.extend(path for path in runner._site_dirs() if path not in sys.path)


def main(argv: list[str]) -> int:
    """The judge: argv is [script, mode ("asserts" or "program"), entry point or ""]."""
    global _channel
    mode = argv[1] if len(argv) > 1 else "asserts"
    entry_point = argv[2] if len(argv) > 2 and argv[2] else None
    _prctl(PR_SET_DUMPABLE, 0)
    _site_path()
    requests_r, requests_w = os.pipe()
    answers_r, answers_w = os.pipe()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    pid = os.fork()
    if pid == 0:
        candidate(requests_r, answers_w)
    import signal

    signal.signal(signal.SIGPIPE, signal.SIG_IGN)  # a write to a dead candidate is an error, not the judge's death
    os.close(requests_r)
    os.close(answers_w)
    work = os.getcwd()
    os.chdir("/")
    _trusted_path(work)
    _channel = Channel(pid, requests_w, answers_r)
    with open(0, "rb", closefd=False) as stdin:
        tests = stdin.read().decode("utf-8", "surrogateescape")
    helpers: str | None = None
    if len(argv) > 3 and argv[3] == "helpers":  # stdin is {"tests": ..., "helpers": the task's own code}
        framed = json.loads(tests)
        tests, helpers = str(framed["tests"]), str(framed["helpers"])
    results = Results(RESULTS_FD)
    try:
        ready = _channel.receive()
    except CandidateGone:
        return _candidate_failed()
    if ready.get("syntax_error") is True:
        _status("syntax_error")
        _channel.wait()
        return 1
    exported = ready.get("ready")
    if type(exported) is not dict:
        _channel.kill()
        sys.stderr.write("the candidate's process did not report its names\n")
        return 1
    namespace: dict[str, Any] = {"__builtins__": builtins}
    for name, info in exported.items():
        value = _export(name, info, entry_point)
        if value is not _SKIP:
            namespace[name] = value
    if helpers is not None:
        try:
            _task_code(helpers, entry_point, namespace)
        except Exception as exc:  # the task's own code: not the candidate's failure, but no verdict either
            _channel.kill()
            sys.stderr.write(f"the task's helper code failed in the judge: {type(exc).__name__}: {exc}\n")
            return 1
    try:
        if mode == "program":
            return _run_program(tests, namespace, results)
        return _run_asserts(tests, entry_point, namespace, results)
    except CandidateGone as gone:
        sys.stderr.write(f"{gone}\n")
        return _candidate_failed()


_SKIP = object()


def _task_code(source: str, entry_point: str | None, namespace: dict[str, Any]) -> None:
    """Run the task's own code (its prompt, less the entry point) in the judge's namespace. Each name it binds is
    the task's: the candidate's value of that name is dropped first, so a name the prompt defines but leaves unbound
    (a `del`, a branch not taken) is missing rather than the candidate's, and the entry point stays the candidate's
    whatever the prompt does with it."""
    for name in helper_names(source, entry_point):
        namespace.pop(name, None)
    theirs = namespace.get(entry_point, _SKIP) if entry_point else _SKIP
    namespace["__name__"] = "__task__"
    exec(compile(ast.Module(helper_nodes(source, entry_point), []), HELPERS, "exec"), namespace)
    if entry_point:
        namespace.pop(entry_point, None)
        if theirs is not _SKIP:
            namespace[entry_point] = theirs


def _export(name: str, info: Any, entry_point: str | None) -> Any:
    """What the judge binds for one of the solution's names (never a builtin's name, unless it is the entry point)."""
    if type(name) is not str or not name.isidentifier() or name.startswith("__") or type(info) is not dict:
        return _SKIP
    if hasattr(builtins, name) and name != entry_point:
        return _SKIP
    if "f" in info and type(info["f"]) is int:
        return Proxy(info["f"], name)
    if "m" in info and type(info["m"]) is str:
        module = info["m"]
        if module.split(".")[0] in getattr(sys, "stdlib_module_names", ()):
            import importlib

            try:
                return importlib.import_module(module)
            except ImportError:
                return _SKIP
        return _SKIP
    if "v" in info:
        try:
            return decode(info["v"])
        except (ProtocolError, ValueError, TypeError, RecursionError):
            return _SKIP
    return _SKIP


def _candidate_failed() -> int:
    """The candidate's process ended before the tests did: its exit status becomes the judge's (0 is `failed`)."""
    status = _channel.wait()
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        sys.stderr.write("the program exited before its tests finished\n")
        return 0
    return 1


def _run_asserts(tests: str, entry_point: str | None, namespace: dict[str, Any], results: Results) -> int:
    namespace["__name__"] = "__tests__"
    try:
        steps = plan(tests, entry_point)
    except TestFileError as exc:  # the host refuses such a file; here too it is no test, never a pass
        sys.stderr.write(f"{exc}\n")
        results.add({"no_tests": str(exc)})
        results.add({"complete": True})
        return 1
    ran, failed_asserts = [0], [0]

    def held(condition: Any) -> bool:
        """The assert's own truth test (one `bool()`, as `assert` makes), counted."""
        ran[0] += 1
        verdict = bool(condition)
        failed_asserts[0] += not verdict
        return verdict

    namespace[RAN] = held
    namespace[EFFECT] = _effect
    lines = tests.splitlines()
    for node in steps.setup:
        exec(compile(instrument(node), TESTS, "exec"), namespace)
    namespace[STDIO] = Proxy(0, STDIO)  # after the setup: a test file cannot rebind it to run the program here
    if steps.parameter is not None and steps.entry is not None:
        if steps.entry not in namespace or not isinstance(namespace[steps.entry], Proxy | Remote):
            raise NameError(f"the solution does not define {steps.entry!r}")
        namespace[steps.parameter] = namespace[steps.entry]
    tested = set(steps.tests)
    outcomes: list[dict[str, Any]] = []
    for index, node in enumerate(steps.body):
        source = "\n".join(lines[node.lineno - 1 : (node.end_lineno or node.lineno)]).strip()
        code = compile(instrument(node), TESTS, "exec")
        if index not in tested:
            exec(code, namespace)
            continue
        name = f"test_{len(outcomes) + 1}:line{node.lineno}"
        before, failed_before = ran[0], failed_asserts[0]
        try:
            exec(code, namespace)
            if ran[0] == before:  # no evidence: a loop over nothing, a branch not taken
                outcomes.append({"name": name, "passed": False, "message": f"none of its asserts ran in {source}"})
            elif failed_asserts[0] != failed_before:  # the test caught its own AssertionError
                message = f"an assert failed (its AssertionError was caught) in {source}"
                outcomes.append({"name": name, "passed": False, "message": message})
            else:
                outcomes.append({"name": name, "passed": True, "message": ""})
        except CandidateGone as gone:
            outcomes.append({"name": name, "passed": False, "message": f"{source}\n{gone}"})
            results.add(outcomes[-1])
            raise
        except AssertionError as exc:
            detail = f": {exc}" if str(exc) else ""
            outcomes.append({"name": name, "passed": False, "message": f"AssertionError{detail} in {source}"})
        except Exception as exc:  # a crashing test is a failed test, with its traceback
            trace = getattr(exc, "_veriloop_trace", "") or "".join(
                traceback.format_exception(type(exc), exc, exc.__traceback__)[-6:]
            )
            outcomes.append({"name": name, "passed": False, "message": f"{source}\n{trace}"})
        results.add(outcomes[-1])
    if not _channel.calls:  # the asserts checked something, but nothing of the candidate's
        results.add({"no_tests": "no test called the program (the tests never used a function it defines)"})
    results.add({"complete": True})
    failed = [outcome for outcome in outcomes if not outcome["passed"]]
    for outcome in failed:
        sys.stderr.write(f"FAILED {outcome['name']}: {outcome['message']}\n")
    return 1 if failed else 0


def _effect(function: Any, /, *args: Any, **kwargs: Any) -> Any:
    """A call whose value the test drops (`f(xs)` as a statement): the test relies on what it does to its arguments,
    so the candidate's changes to them are made to the test's objects, here and nowhere else. Every other call
    leaves the test's data as it was: `assert f(xs) == sorted(xs)` sorts the list the test built."""
    if type(function) is Proxy or type(function) is Remote:
        return _channel.call(function.ref, args, kwargs, effect=True)
    return function(*args, **kwargs)


REFERENCE = "f_gold"
REFERENCE_GUARD = "_veriloop_reference"


def _reference(gold: Any) -> Any:
    """TransCoder's `f_gold`, called with its arguments as the program built them: `f_filled(*p) == f_gold(*p)`
    runs the candidate first on the same list, and a change carried back (emptying it) would make f_gold agree.
    Tests of in-place functions give f_filled its own copy (`filled_function_param`), which keeps the change."""

    def call(*args: Any, **kwargs: Any) -> Any:
        return gold(*[_channel.original(arg) for arg in args], **kwargs)

    return call


def _run_program(program: str, namespace: dict[str, Any], results: Results) -> int:
    """A whole test program (TransCoder's Python scripts) as __main__; what it prints is the judge's to report."""
    import io

    namespace["__name__"] = "__main__"
    namespace[REFERENCE_GUARD] = _reference
    _channel.originals = {}
    tree = ast.parse(program, TESTS)
    body: list[ast.stmt] = []
    for node in tree.body:  # `f_gold = guard(f_gold)` after each definition of the reference
        body.append(node)
        if isinstance(node, ast.FunctionDef) and node.name == REFERENCE:
            call = ast.Call(ast.Name(REFERENCE_GUARD, ast.Load()), [ast.Name(REFERENCE, ast.Load())], [])
            body.append(ast.copy_location(ast.Assign([ast.Name(REFERENCE, ast.Store())], call), node))
    tree.body = [statement for node in body for statement in instrument(node).body]
    namespace[RAN] = bool
    namespace[EFFECT] = _effect
    captured = io.StringIO()
    real = sys.stdout
    sys.stdout = captured
    try:
        exec(compile(ast.fix_missing_locations(tree), TESTS, "exec"), namespace)
    finally:
        sys.stdout = real
        results.add({"stdout": captured.getvalue()[-(1 << 20) :]})
    results.add({"complete": True})
    return 0
