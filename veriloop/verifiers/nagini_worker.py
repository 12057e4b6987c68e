"""A warm Nagini worker, run by the Nagini virtualenv's Python (not veriloop's): one JVM, the Viper prelude
loaded once, then one JSON request per stdin line and one JSON reply per stdout line.

Kept free of veriloop imports: Nagini pins old mypy, z3 and pytest, so it lives in its own virtualenv.
Requests: {"id": N, "path": "/abs/file.py"}. Replies: {"id": N, "status": ..., "errors": [...], "text": ...}.
The JVM cannot restart inside a process, so the parent recycles the whole worker on a crash or a timeout.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sys
import traceback
from typing import Any

TYPE_ERROR = re.compile(r"^(?P<file>.*?):(?P<line>\d+)(?::(?P<col>\d+))?: error: (?P<msg>.*)$")


def main() -> int:
    # Protocol lines go to the real stdout; everything the JVM or Nagini prints goes to stderr.
    protocol = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    from importlib.metadata import version

    from nagini_translation import main as nm  # type: ignore[import-not-found]
    from nagini_translation.lib import config  # type: ignore[import-not-found]
    from nagini_translation.lib.errors import error_manager  # type: ignore[import-not-found]
    from nagini_translation.lib.jvmaccess import JVM  # type: ignore[import-not-found]
    from nagini_translation.lib.typeinfo import TypeException  # type: ignore[import-not-found]
    from nagini_translation.lib.util import InvalidProgramException, UnsupportedException  # type: ignore[import-not-found]
    from nagini_translation.verifier import Success, ViperVerifier  # type: ignore[import-not-found]

    jvm = JVM(config.classpath)
    nm.sil_programs = nm.load_sil_files(jvm, 8)
    _reply(protocol, {"ready": True, "version": version("nagini"), "pid": os.getpid()})
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        path = request["path"]
        reply: dict[str, Any] = {"id": request.get("id")}
        sink = io.StringIO()
        try:
            with contextlib.redirect_stdout(sink):
                error_manager.clear()
                translated = nm.translate(path, jvm, 8)
            if translated is None:
                reply.update(status="syntax_error", errors=[], text="type error")
            else:
                modules, program = translated
                result = nm.verify(modules, program, path, jvm, [], backend=ViperVerifier.silicon)
                if result is None:
                    reply.update(status="infra_error", errors=[], text="the Viper backend raised")
                elif isinstance(result, Success):
                    reply.update(status="verified", errors=[], text=result.to_string(False, False))
                else:
                    reply.update(
                        status="failed", errors=[_error(e) for e in result.errors], text=result.to_string(False, False)
                    )
        except TypeException as exc:
            reply.update(status="syntax_error", errors=[_type_error(m) for m in exc.messages], text="Type error")
        except (InvalidProgramException, UnsupportedException) as exc:
            node = getattr(exc, "node", None)
            message = getattr(exc, "message", None) or getattr(exc, "code", None) or (exc.args[0] if exc.args else "")
            kind = "invalid" if isinstance(exc, InvalidProgramException) else "unsupported"
            reply.update(
                status="syntax_error",
                errors=[
                    {
                        "id": kind,
                        "message": f"{kind} program: {message}",
                        "line": getattr(node, "lineno", None),
                        "column": getattr(node, "col_offset", None),
                    }
                ],
                text=f"Translation failed: {message}",
            )
        except SyntaxError as exc:
            reply.update(
                status="syntax_error",
                errors=[{"id": "syntax", "message": str(exc.msg), "line": exc.lineno, "column": exc.offset}],
                text=f"SyntaxError: {exc.msg}",
            )
        except Exception as exc:  # a translator crash: report it, stay up
            reply.update(status="infra_error", errors=[], text=f"translator crash: {type(exc).__name__}: {exc}")
            traceback.print_exc()
        reply["log"] = sink.getvalue()[-2000:]
        _reply(protocol, reply)
    return 0


def _error(error: Any) -> dict[str, Any]:
    position = error.position
    return {
        "id": str(error.full_id),
        "message": str(error.message),
        "line": int(position.line),
        "column": int(position.column) + 1,
        "line_end": int(position.line_end),
        "column_end": int(position.column_end) + 1,
    }


def _type_error(message: str) -> dict[str, Any]:
    match = TYPE_ERROR.match(message)
    if not match:
        return {"id": "type", "message": message, "line": None, "column": None}
    col = match.group("col")
    return {
        "id": "type",
        "message": match.group("msg"),
        "line": int(match.group("line")),
        "column": int(col) if col else None,
    }


def _reply(stream: Any, payload: dict[str, Any]) -> None:
    stream.write(json.dumps(payload) + "\n")
    stream.flush()


if __name__ == "__main__":
    code = main()
    sys.stderr.flush()
    os._exit(code)  # the JVM's threads would keep a plain exit waiting once the parent has gone
