"""The reply-shape counter the μCode, F2STrans and ReVISE benches share: adversarial replies that look like the
asked-for answer but are not (another fence, two blocks, a cut fence, the signature only in a comment or
string, a def of another name)."""

from __future__ import annotations

import pytest

from veriloop.bench._shapes import Shape, reply_shape, reply_shapes
from veriloop.records import Completion, ExecResult, ExecStatus, Node

GOOD = "```python\ndef add(a, b):\n    return a + b\n```"

CASES = [
    # (reply, block, blocks, parses, defines)
    (GOOD, True, 1, True, True),
    ("Sure, here it is.", False, 0, False, False),  # prose: its text is the code, and it is not Python
    ("", False, 0, True, False),  # nothing at all parses, but defines nothing
    ("```javascript\ndef add(a, b):\n    return a + b\n```", False, 1, True, True),  # another language's fence
    ("```py\ndef add(a, b):\n    return a + b\n```", False, 1, True, True),  # `py` is not the tag asked for
    ("```\ndef add(a, b):\n    return a + b\n```", False, 1, True, True),  # untagged
    (GOOD + "\nand a test:\n```python\nassert add(1, 2) == 3\n```", True, 2, True, True),  # two blocks
    ("```cpp\nint add(int a);\n```\n" + GOOD, True, 2, True, True),  # the python block is found second
    ("```python\ndef add(a, b):\n    return a +", True, 1, False, False),  # unclosed fence, code cut mid-line
    ("```python\ndef add(a, b):\n    return a + b", True, 1, True, True),  # unclosed fence, complete code
    ("```python\n# def add(a, b):\nresult = 3\n```", True, 1, True, False),  # signature only in a comment
    ('```python\nsource = "def add(a, b): return a + b"\n```', True, 1, True, False),  # only in a string
    ('```python\n"""def add(a, b):"""\n```', True, 1, True, False),  # only in a docstring
    ("```python\ndef sub(a, b):\n    return a - b\n```", True, 1, True, False),  # a def of another name
    ("```python\ndef adder(a, b):\n    return a + b\n```", True, 1, True, False),  # a name with `add` as prefix
    ("```python\ndef outer():\n    def add(a, b):\n        return a + b\n```", True, 1, True, False),  # nested
    ("```python\nclass K:\n    def add(self, b):\n        return b\n```", True, 1, True, False),  # a method
    ("```python\nasync def add(a, b):\n    return a + b\n```", True, 1, True, True),
    ("Use ```python``` fences, like ``` this.", False, 0, False, False),  # inline backticks are no block
    ("```python\ndef add(a, b):\n    return a + b\n```\nThis works because ```", True, 1, True, True),
]


@pytest.mark.parametrize(("text", "block", "blocks", "parses", "defines"), CASES)
def test_reply_shape(text: str, block: bool, blocks: int, parses: bool, defines: bool) -> None:
    assert reply_shape(text, "python", "add") == Shape(block=block, blocks=blocks, parses=parses, defines=defines)


def test_without_a_name_the_function_is_not_judged() -> None:
    assert reply_shape(GOOD, "python").defines is None


def test_other_languages_take_the_compile_verdict() -> None:
    text = "```cpp\nint add(int a, int b) { return a + b; }\n```"
    assert reply_shape(text, "cpp", "add", compiled=True) == Shape(block=True, blocks=1, parses=True, defines=None)
    assert reply_shape(text, "cpp", "add", compiled=False).parses is False
    assert reply_shape(text, "java", "add").parses is None  # no verdict: unknown, not counted
    assert reply_shape(text, "java").block is False


def _node(role: str, text: str | None, task: str = "t/1", status: ExecStatus | None = None) -> Node:
    completion = None if text is None else Completion(text=text)
    result = None if status is None else ExecResult(status=status)
    return Node(run_id="r", task_id=task, role=role, completion=completion, exec_result=result)


def test_shares_over_stored_nodes() -> None:
    nodes = [
        _node("generate", GOOD),
        _node("refine", "I think the code is right."),
        _node("refine", "```python\ndef sub(a, b):\n    return a - b\n```"),
        _node("generate", GOOD + "\n```python\nprint(1)\n```"),
        _node("verify", "[eos]"),  # not a reply with code: not counted
        _node("final", None),
        _node("generate", None),  # no completion: not counted
    ]
    shares = reply_shapes(nodes, ("generate", "refine"), "python", {"t/1": "add"})
    assert shares == {
        "replies": 4,
        "without_code_block": 0.25,
        "several_blocks": 0.25,
        "unparseable": 0.25,
        "without_function": 0.5,
    }
    assert reply_shapes(nodes, ("translate",), "python") is None
    assert reply_shapes(nodes, ("generate",), "python")["without_function"] is None  # type: ignore[index]


def test_compile_verdicts_come_from_the_sandbox() -> None:
    text = "```cpp\nint f(int a) { return a; }\n```"
    nodes = [
        _node("translate", text, status=ExecStatus.PASSED),
        _node("repair", text, status=ExecStatus.COMPILE_ERROR),
        _node("repair", text, status=ExecStatus.INFRA_ERROR),  # no verdict on the code: left out
        _node("repair", text),
    ]
    shares = reply_shapes(nodes, ("translate", "repair"), lambda node: "cpp")
    assert shares is not None and shares["unparseable"] == 0.5 and shares["without_code_block"] == 0.0
