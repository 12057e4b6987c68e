"""The style score of a translation: how close it is to the human reference, and how clean its linter says it is.

F2STrans scores candidates by stylistic similarity to a human reference; its exact metric is not
public, so this is a CodeBLEU-like measure without external grammars (choice documented here):

* ``bleu``: BLEU-4 over code tokens (add-one smoothing on 2..4-grams, brevity penalty);
* ``weighted``: the same n-gram match with language keywords weighted 1.0 and other tokens 0.2
  (CodeBLEU's keyword weighting);
* ``syntax`` (Python targets): the share of the reference's AST subtree shapes (node types to depth
  3, names and constants dropped) that the candidate also has, CodeBLEU's syntactic match on the
  stdlib `ast`. CodeBLEU's data-flow match is left out.

``similarity`` is the mean of the available parts. The linter part counts findings per 10 lines:
Python by ruff (``E,W,F,N,UP,SIM,C4,B,RET,PIE`` with preview, so whitespace rules count), C/C++ by
``gcc/g++ -fsyntax-only -Wall -Wextra``, Java by ``javac -Xlint:all``; Go and Rust have no linter
here. ``lint = 1 / (1 + findings per 10 lines)`` and ``score = (similarity + lint) / 2`` (just the
similarity when no linter ran). Linters only parse the code (nothing runs), on the host, with a timeout.
"""

from __future__ import annotations

import ast
import io
import json
import keyword
import math
import re
import shutil
import subprocess
import sys
import tempfile
import tokenize
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

CPP_PRELUDE = "#include <bits/stdc++.h>\nusing namespace std;\n"
C_PRELUDE = "#include <stdio.h>\n#include <stdlib.h>\n#include <math.h>\n#include <limits.h>\n#include <stdbool.h>\n"
"""Headers put before a C or C++ candidate for the compiler's syntax and warning check."""


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


C_KEYWORDS = _words(
    "auto bool break case catch char class const continue default delete do double else enum extern false float for "
    "goto if inline int long new nullptr private protected public return short signed sizeof static struct switch "
    "template this throw true try typedef typename unsigned using virtual void volatile while vector string map set "
    "final boolean byte extends implements import instanceof interface package super synchronized throws null "
    "String List ArrayList HashMap Math fn let mut pub impl match loop as in usize i32 i64 u32 u64 f32 f64 Vec "
    "func var range make len chan go defer type"
)
PY_KEYWORDS = frozenset(keyword.kwlist) | _words(
    "len range enumerate zip sorted min max sum abs int float str list dict set tuple print map filter any all"
)
_TOKEN = re.compile(r"[A-Za-z_]\w*|\d+(?:\.\d+)?|==|!=|<=|>=|&&|\|\||<<|>>|\+\+|--|->|::|\S")
_C_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.DOTALL)
RUFF_RULES = "E,W,F,N,UP,SIM,C4,B,RET,PIE"
LINT_TIMEOUT_S = 20.0
KEYWORD_WEIGHT, OTHER_WEIGHT = 1.0, 0.2


@dataclass(frozen=True)
class StyleScore:
    """One candidate's style, stored in its node's metadata under `style`."""

    score: float
    similarity: float
    bleu: float
    weighted: float
    syntax: float | None
    lint: float | None
    lint_findings: int | None
    linter: str | None
    lines: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def tokens(code: str, language: str) -> list[str]:
    """Code tokens without comments or layout (Python by `tokenize`, others by a C-family regex)."""
    if language == "python":
        try:
            skip = {
                tokenize.COMMENT,
                tokenize.NL,
                tokenize.NEWLINE,
                tokenize.INDENT,
                tokenize.DEDENT,
                tokenize.ENDMARKER,
                tokenize.ENCODING,
            }
            found = tokenize.generate_tokens(io.StringIO(code).readline)
            return [token.string for token in found if token.type not in skip and token.string.strip()]
        except (tokenize.TokenError, IndentationError, SyntaxError):
            code = re.sub(r"#[^\n]*", "", code)
            return _TOKEN.findall(code)
    return _TOKEN.findall(_C_COMMENT.sub(" ", code))


def _ngrams(items: Sequence[str], n: int) -> Counter[tuple[str, ...]]:
    return Counter(tuple(items[i : i + n]) for i in range(len(items) - n + 1))


def _weight(gram: tuple[str, ...], keywords: frozenset[str]) -> float:
    return sum(KEYWORD_WEIGHT if token in keywords else OTHER_WEIGHT for token in gram) / len(gram)


def _weigh(gram: tuple[str, ...], keywords: frozenset[str] | None) -> float:
    return 1.0 if keywords is None else _weight(gram, keywords)


def bleu(candidate: Sequence[str], reference: Sequence[str], keywords: frozenset[str] | None = None) -> float:
    """BLEU-4 of one candidate against one reference; with `keywords`, n-grams count by keyword weight."""
    if not candidate or not reference:
        return 0.0
    log_sum = 0.0
    for n in range(1, 5):
        matched: float
        total: float
        cand, ref = _ngrams(candidate, n), _ngrams(reference, n)
        matched = sum(min(count, ref[gram]) * _weigh(gram, keywords) for gram, count in cand.items())
        total = sum(count * _weigh(gram, keywords) for gram, count in cand.items())
        if n > 1:
            matched, total = matched + 1.0, total + 1.0
        if matched <= 0 or total <= 0:
            return 0.0
        log_sum += math.log(matched / total) / 4
    brevity = 1.0 if len(candidate) > len(reference) else math.exp(1 - len(reference) / len(candidate))
    return brevity * math.exp(log_sum)


def _shape(node: ast.AST, depth: int) -> str:
    children = [child for child in ast.iter_child_nodes(node) if not isinstance(child, ast.expr_context)]
    if depth == 0 or not children:
        return type(node).__name__
    return f"{type(node).__name__}({','.join(_shape(child, depth - 1) for child in children)})"


def _shapes(code: str) -> Counter[str] | None:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    return Counter(
        _shape(node, 3)
        for node in ast.walk(tree)
        if not isinstance(node, ast.Module | ast.expr_context | ast.Name | ast.Constant | ast.arg)
    )


def syntax_match(candidate: str, reference: str) -> float | None:
    """Share of the reference's subtree shapes found in the candidate (0 when the candidate does not parse)."""
    ref = _shapes(reference)
    if not ref:
        return None
    cand = _shapes(candidate)
    if cand is None:
        return 0.0
    return sum(min(count, cand[shape]) for shape, count in ref.items()) / sum(ref.values())


# --------------------------------------------------------------------------- linters


def _ruff() -> str | None:
    beside = Path(sys.executable).parent / "ruff"
    return str(beside) if beside.is_file() else shutil.which("ruff")


def _run(argv: list[str], stdin: str | None = None, cwd: str | None = None) -> subprocess.CompletedProcess[str] | None:
    try:
        return subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=LINT_TIMEOUT_S, cwd=cwd)
    except (OSError, subprocess.TimeoutExpired):
        return None


def lint(code: str, language: str) -> tuple[str, int] | None:
    """(linter, number of findings) for `code`, or None when the language has no linter here."""
    if language == "python":
        ruff = _ruff()
        if ruff is None:
            return None
        argv = [
            ruff,
            "check",
            "--isolated",
            "--preview",
            "--select",
            RUFF_RULES,
            "--line-length",
            "120",
            "--output-format",
            "json",
            "--no-cache",
            "--stdin-filename",
            "candidate.py",
            "-",
        ]
        done = _run(argv, stdin=code.rstrip("\n") + "\n")
        if done is None or done.returncode not in (0, 1):
            return None
        try:
            return "ruff", len(json.loads(done.stdout or "[]"))
        except ValueError:
            return None
    if language in ("c", "cpp"):
        compiler = "gcc" if language == "c" else "g++"
        path = shutil.which(compiler)
        if path is None:
            return None
        prelude = CPP_PRELUDE if language == "cpp" else C_PRELUDE
        flag = "-std=gnu++17" if language == "cpp" else "-std=gnu17"
        kind = "c++" if language == "cpp" else "c"
        done = _run([path, "-fsyntax-only", "-Wall", "-Wextra", flag, "-x", kind, "-"], stdin=prelude + code)
        if done is None:
            return None
        return compiler, done.stderr.count("warning:")
    if language == "java":
        javac = shutil.which("javac")
        if javac is None:
            return None
        with tempfile.TemporaryDirectory(prefix="veriloop-lint-") as folder:
            source = Path(folder) / "Lint.java"
            source.write_text("import java.util.*;\nclass Lint {\n" + code + "\n}\n", encoding="utf-8")
            done = _run([javac, "-Xlint:all", "-d", folder, str(source)], cwd=folder)
        if done is None:
            return None
        return "javac", len(re.findall(r": warning:", done.stderr))
    return None


def style_score(candidate: str, reference: str, language: str, *, use_linter: bool = True) -> StyleScore:
    """Similarity to the reference plus linter cleanliness, both in [0, 1]."""
    keywords = PY_KEYWORDS if language == "python" else C_KEYWORDS
    cand, ref = tokens(candidate, language), tokens(reference, language)
    plain, weighted = bleu(cand, ref), bleu(cand, ref, keywords)
    syntax = syntax_match(candidate, reference) if language == "python" else None
    parts = [plain, weighted] + ([syntax] if syntax is not None else [])
    similarity = sum(parts) / len(parts)
    lines = max(1, len([line for line in candidate.splitlines() if line.strip()]))
    linted = lint(candidate, language) if use_linter and candidate.strip() else None
    lint_value = None if linted is None else 1.0 / (1.0 + 10.0 * linted[1] / lines)
    score = similarity if lint_value is None else (similarity + lint_value) / 2
    return StyleScore(
        score=round(score, 4),
        similarity=round(similarity, 4),
        bleu=round(plain, 4),
        weighted=round(weighted, 4),
        syntax=None if syntax is None else round(syntax, 4),
        lint=None if lint_value is None else round(lint_value, 4),
        lint_findings=None if linted is None else linted[1],
        linter=None if linted is None else linted[0],
        lines=lines,
    )


def tidy(code: str, language: str) -> str:
    """Layout-only clean-up of a human reference before it becomes a training target (Python: `ruff format`).

    TransCoder's references are detokenised code (spaces inside brackets, stray semicolons); formatting
    keeps the human's translation and drops the tokeniser's layout. Code that does not parse is kept as is.
    """
    ruff = _ruff() if language == "python" else None
    if ruff is None:
        return code
    done = _run(
        [ruff, "format", "--isolated", "--line-length", "120", "--stdin-filename", "reference.py", "-"],
        stdin=code.rstrip("\n") + "\n",
    )
    if done is None or done.returncode != 0 or not done.stdout.strip():
        return code
    return done.stdout.rstrip("\n")
