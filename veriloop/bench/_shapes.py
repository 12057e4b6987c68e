"""Reply shapes: how often a method's replies miss the form its prompt asks for (one fenced block in the
target language, holding a function of a given name, that parses), so a bench can show what the `structured`
constraint (`agents.common.answer_constraint`) changes. Shared by the μCode, F2STrans and ReVISE benches.

Every share is read off the reply text alone, not off the program the method built from it (a method may
prepend the task's prompt to a body-only reply), so the figures say what the model wrote.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from veriloop.llm.codeblocks import extract_code, fenced_blocks
from veriloop.records import ExecStatus


@dataclass(frozen=True)
class Shape:
    """One reply: its blocks, whether its code parses, whether it defines the function asked for."""

    block: bool
    """It holds a block fenced with the target language's tag (a last block cut off before its fence counts)."""
    blocks: int
    """Fenced blocks of any language."""
    parses: bool | None
    """Its code (the target-language block, else the first block, else the text) parses (Python) or compiled
    (other languages, from the sandbox's verdict); None when unknown."""
    defines: bool | None
    """Python: its code defines the function `name` at top level (unparseable code does not); None when no name
    was asked for or the language is not Python."""


def _python_defines(code: str, name: str) -> bool:
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    return any(isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == name for node in tree.body)


def reply_shape(text: str, fence: str, name: str | None = None, compiled: bool | None = None) -> Shape:
    """The shape of one reply asked for one block fenced `fence` (`python`, `cpp`, ...) defining `name`.

    `compiled` is the sandbox's verdict for a language veriloop cannot parse here (ignored for Python)."""
    blocks = fenced_blocks(text)
    code = extract_code(text, fence)
    python = fence.lower() in ("python", "py")
    parses: bool | None = compiled
    if python:
        try:
            ast.parse(code)
            parses = True
        except (SyntaxError, ValueError):
            parses = False
    defines = _python_defines(code, name) if python and name else None
    return Shape(
        block=any(tag == fence.lower() for tag, _ in blocks), blocks=len(blocks), parses=parses, defines=defines
    )


def _share(values: Iterable[bool | None]) -> float | None:
    known = [value for value in values if value is not None]
    return round(sum(known) / len(known), 4) if known else None


def shares(shapes: list[Shape]) -> dict[str, Any] | None:
    """The shares over a list of replies: without a target-language block, with more than one block,
    unparseable (or not compiling), without the named function; None for no replies."""
    if not shapes:
        return None
    return {
        "replies": len(shapes),
        "without_code_block": _share(not shape.block for shape in shapes),
        "several_blocks": _share(shape.blocks > 1 for shape in shapes),
        "unparseable": _share(None if shape.parses is None else not shape.parses for shape in shapes),
        "without_function": _share(None if shape.defines is None else not shape.defines for shape in shapes),
    }


def reply_shapes(
    nodes: Iterable[Any],
    roles: Iterable[str],
    fence: Callable[[Any], str] | str,
    names: Mapping[str, str] | None = None,
) -> dict[str, Any] | None:
    """`shares` over the stored nodes of the given roles that hold a completion; `fence` is the target
    language's fence tag (or a function of the node giving it); `names` maps task ids to the function name
    asked for. For a language other than Python, a node's compile verdict comes from its `exec_result`."""
    wanted = set(roles)
    shapes = []
    for node in nodes:
        if node.role not in wanted or node.completion is None:
            continue
        tag = fence(node) if callable(fence) else fence
        result = node.exec_result
        unknown = result is None or result.status is ExecStatus.INFRA_ERROR
        compiled = None if unknown else result.status is not ExecStatus.COMPILE_ERROR
        name = (names or {}).get(node.task_id)
        shapes.append(reply_shape(node.completion.text, tag, name, compiled))
    return shares(shapes)
