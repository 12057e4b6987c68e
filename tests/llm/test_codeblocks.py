from __future__ import annotations

from veriloop.llm.codeblocks import extract_code


def test_first_block_with_the_language_tag_wins() -> None:
    text = "Here:\n```text\nnot code\n```\nand\n```python\ndef f():\n    return 1\n```\ntrailing"
    assert extract_code(text, "python") == "def f():\n    return 1"


def test_unclosed_block_cut_by_a_stop_string_is_kept() -> None:
    assert extract_code("```python\ndef f():\n    return 2", "python") == "def f():\n    return 2"


def test_reply_without_fences_is_the_code() -> None:
    assert extract_code("def f():\n    return 3\n") == "def f():\n    return 3"


def test_untagged_block_when_no_tag_matches() -> None:
    assert extract_code("```\nx = 1\n```", "python") == "x = 1"
