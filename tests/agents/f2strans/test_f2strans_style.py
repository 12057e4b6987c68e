"""The style score: CodeBLEU-like similarity to the reference and real linter findings."""

from __future__ import annotations

import shutil

import pytest

from veriloop.agents.f2strans.style import bleu, lint, style_score, syntax_match, tokens

REFERENCE = "def addOne ( x ) :\n    m = 1\n    while ( x & m ) :\n        x = x ^ m\n"
REFERENCE += "        m <<= 1\n    x = x ^ m\n    return x"
IDIOMATIC = "def add_one(x):\n    m = 1\n    while x & m:\n        x ^= m\n        m <<= 1\n    return x ^ m\n"
LITERAL = "def addOne(x):\n    return -(~x);\n"


def test_tokens_ignore_layout_and_comments() -> None:
    assert tokens("def f ( x ) :  # note\n    return x\n", "python") == ["def", "f", "(", "x", ")", ":", "return", "x"]
    assert tokens("int f(int x) { /* c */ return x >= 1; } // end", "cpp") == [
        "int",
        "f",
        "(",
        "int",
        "x",
        ")",
        "{",
        "return",
        "x",
        ">=",
        "1",
        ";",
        "}",
    ]
    assert tokens("def f(:\n  'unterminated", "python")[:2] == ["def", "f"]


def test_similarity_parts() -> None:
    ref = tokens(REFERENCE, "python")
    assert bleu(ref, ref) == pytest.approx(1.0)
    assert bleu([], ref) == 0.0
    assert 0.0 < bleu(tokens(LITERAL, "python"), ref) < bleu(tokens(IDIOMATIC, "python"), ref) < 1.0
    assert syntax_match(REFERENCE, REFERENCE) == 1.0
    assert syntax_match("def f(:", REFERENCE) == 0.0
    assert syntax_match(REFERENCE, "") is None


def test_ruff_findings_lower_the_score() -> None:
    clean = style_score(IDIOMATIC, REFERENCE, "python")
    messy = style_score(LITERAL, REFERENCE, "python")
    same = style_score(REFERENCE, REFERENCE, "python")
    assert clean.linter == "ruff" and clean.lint_findings == 0 and clean.lint == 1.0
    assert messy.lint_findings is not None and messy.lint_findings >= 2  # N802 camelCase, E703 semicolon
    assert same.similarity == 1.0 and same.lint is not None and same.lint < 0.5  # spaces before brackets: E2xx
    assert messy.score < clean.score
    assert clean.score == pytest.approx((clean.similarity + 1.0) / 2, abs=1e-3)
    off = style_score(LITERAL, REFERENCE, "python", use_linter=False)
    assert off.lint is None and off.score == off.similarity


@pytest.mark.slow
@pytest.mark.parametrize(("language", "tool"), [("cpp", "g++"), ("c", "gcc"), ("java", "javac")])
def test_compiler_warnings_count_as_findings(language: str, tool: str) -> None:
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} is not installed")
    body = (
        "int f(int x) { int unused; return x; }"
        if language != "java"
        else ("static int f(int x) { List raw = new ArrayList(); raw.add(x); return x; }")
    )
    clean = "int f(int x) { return x; }" if language != "java" else "static int f(int x) { return x; }"
    linter, findings = lint(body, language) or ("", 0)
    assert linter == tool and findings >= 1  # unused variable; raw types and unchecked calls for javac
    assert lint(clean, language) == (tool, 0)
    assert style_score(body, clean, language).syntax is None


def test_languages_without_a_linter_use_similarity_only() -> None:
    score = style_score("func f(x int) int { return x }", "func f(x int) int {\n\treturn x\n}", "go")
    assert score.linter is None and score.score == score.similarity == 1.0


def test_tidy_changes_layout_only() -> None:
    from veriloop.agents.f2strans.style import tidy

    assert tidy("def addOne ( x ) :\n    m = 1 ;\n    return ( x + m )", "python") == (
        "def addOne(x):\n    m = 1\n    return x + m"
    )
    assert tidy("def f(:\n", "python") == "def f(:\n"
    assert tidy("int f ( int x ) { return x; }", "cpp") == "int f ( int x ) { return x; }"
