"""Proof-hint infill: the program stays the task's, the model writes only annotations at marked points.

What depends on the verifier's language (slots, the hint grammar, where a hint goes, the prompt's examples,
which lines are hints) sits in a `HintLanguage`; this module holds the Dafny one and the search problem, and
`nagini_hints.py` the Nagini one. Each `while` loop of a Dafny program is a hint slot. The model answers with
one block per slot,

    // loop 1
    invariant 0 <= i <= a.Length
    decreases a.Length - i

generated under a Lark grammar (`hint_grammar`) whose expressions use only the program's own names, so every
answer parses; `splice` puts each block between the loop's condition and its body. The spec guard still
judges the spliced program. A refinement shows which hints the verifier rejected (its diagnostics mapped back
to the hint lines) and asks for the hint set again, keeping the ones that held and replacing or strengthening
the failing ones; the program itself is never regenerated.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from veriloop.agents.alphaverus.problem import VerifierProblem
from veriloop.agents.alphaverus.prompts import fenced
from veriloop.records import Constraint, Message, Node

_WHILE = re.compile(r"\bwhile\b")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_']*")
_KEYWORDS = {
    "method",
    "function",
    "predicate",
    "lemma",
    "returns",
    "requires",
    "ensures",
    "modifies",
    "reads",
    "var",
    "while",
    "if",
    "else",
    "then",
    "return",
    "invariant",
    "decreases",
    "assert",
    "assume",
    "forall",
    "exists",
    "new",
    "int",
    "nat",
    "bool",
    "real",
    "char",
    "string",
    "seq",
    "set",
    "map",
    "multiset",
    "array",
    "ghost",
    "old",
    "fresh",
    "true",
    "false",
    "null",
    "this",
    "class",
    "datatype",
    "module",
    "import",
    "include",
    "const",
    "static",
    "in",
    "by",
    "calc",
    "match",
    "case",
    "break",
    "print",
    "Length",
}
QUANTIFIED = ("k", "j", "m", "t")
"""Bound variable names for a `forall`: the first one the program does not use."""
MIN_INVARIANTS = 2
MAX_INVARIANTS = 3


@dataclass(frozen=True)
class Slot:
    """One marked point: the offset of the `{` that opens a loop body, the loop's indentation, and the offset of
    its `while` (where Dafny reports a loop's termination errors)."""

    brace: int
    indent: str
    keyword: int = -1


def _blank_comments(program: str) -> str:
    """The program with comments and string literals replaced by spaces (offsets kept)."""
    return re.sub(
        r"//[^\n]*|/\*.*?\*/|\"(?:\\.|[^\"\\])*\"", lambda m: re.sub(r"[^\n]", " ", m.group()), program, flags=re.S
    )


def hint_slots(program: str) -> list[Slot]:
    """Every `while` loop's body brace, in source order."""
    code = _blank_comments(program)
    slots = []
    for found in _WHILE.finditer(code):
        depth = 0
        for index in range(found.end(), len(code)):
            char = code[index]
            if char in "([":
                depth += 1
            elif char in ")]":
                depth -= 1
            elif char == "{" and depth <= 0:
                line_start = code.rfind("\n", 0, found.start()) + 1
                indent = re.match(r"[ \t]*", code[line_start:]).group()  # type: ignore[union-attr]
                slots.append(Slot(brace=index, indent=indent, keyword=found.start()))
                break
    return slots


def program_names(program: str) -> list[str]:
    """Identifiers the hints may mention: the program's variables, parameters and functions (not its methods)."""
    code = _blank_comments(program)
    methods = set(re.findall(r"\b(?:method|lemma|class|datatype|module)\s+(?:\{[^}]*\}\s*)?([A-Za-z_][\w']*)", code))
    names = {name for name in _IDENT.findall(code) if name not in _KEYWORDS and name not in methods}
    return sorted(names - bound_only(code))


def bound_only(code: str) -> set[str]:
    """Names a `forall`/`exists` binds and nothing declares: they mean nothing outside their quantifier."""
    bound: set[str] = set()
    for group in re.findall(r"\b(?:forall|exists)\s+([A-Za-z_][\w'\s,:<>]*?)\s*(?:::|\|)", code):
        bound |= {part.split(":")[0].strip() for part in group.split(",")}
    declared = set(re.findall(r"\bvar\s+([A-Za-z_][\w']*)", code))
    declared |= set(re.findall(r"[(,]\s*(?:ghost\s+)?([A-Za-z_][\w']*)\s*:(?!:)", code))
    return bound - declared


def _literal(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def hint_grammar(program: str, slots: Sequence[Slot]) -> Constraint:
    """A Lark grammar for one hint block per slot: 2-3 invariants and an optional decreases clause each.

    Each annotation kind has its own shape: an invariant is a boolean formula (comparisons of integer terms,
    the program's boolean names; products and quotients chain, as in `n * (n + 1) / 2`) or one `forall` over a
    range of a fresh bound variable whose body reads the
    collections at that variable (a body that never mentions it has no trigger and says nothing); the bound
    variable exists only inside its `forall`. A `decreases` clause is an integer term without indexing (a sum of
    names, numbers, lengths), the kind of measure Dafny can check and never an out-of-range read."""
    code = _blank_comments(program)
    collections = set(re.findall(r"([A-Za-z_][\w']*)\s*:\s*(?:array|seq|string)\b", code))
    collections |= set(re.findall(r"([A-Za-z_][\w']*)\s*:=\s*new\b", code))
    booleans = set(re.findall(r"([A-Za-z_][\w']*)\s*:\s*bool\b", code))
    booleans |= set(re.findall(r"\bvar\s+([A-Za-z_][\w']*)\s*:=\s*(?:true|false)\b", code))
    known = set(program_names(program))
    bound = next((name for name in QUANTIFIED if name not in known), "k_")
    names = sorted(known - collections - booleans, key=lambda n: (-len(n), n))
    arrays = sorted(collections & known, key=lambda n: (-len(n), n))
    flags = sorted(booleans & known - collections, key=lambda n: (-len(n), n))
    loops = " ".join(f"loop{index}" for index in range(1, len(slots) + 1))
    rules = [f"start: {loops}"]
    optional = " ".join(["inv"] * (MIN_INVARIANTS - 1) + ["inv?"] * (MAX_INVARIANTS - MIN_INVARIANTS))
    for index in range(1, len(slots) + 1):
        rules.append(f'loop{index}: "// loop {index}\\n" inv {optional} dec?')
    lengths = ' | "|" coll "|" | coll ".Length"' if arrays else ""
    at = _literal(bound)
    rules += [
        'inv: "invariant " expr "\\n"',
        'dec: "decreases " dsum "\\n"',
        "expr: quant | implies" if arrays else "expr: implies",
        'implies: conj (" ==> " conj)?',
        'conj: cmp ((" && " | " || ") cmp)*',
        "cmp: sum cmpop sum (cmpop sum)?" + (' | "!"? flag' if flags else ""),
        'cmpop: " <= " | " < " | " == " | " != " | " >= " | " > "',
        'sum: term ((" + " | " - ") term)*',
        'term: atom ((" * " | " / " | " % ") atom)*',
        'atom: name | NUMBER | "(" sum ")"'
        + (' | coll "[" sum "]" | "old(" coll "[" sum "])"' + lengths if arrays else ""),
        'dsum: dterm ((" + " | " - ") dterm)*',
        'dterm: name | NUMBER | "(" dsum ")"' + lengths,
        *([f"name: {' | '.join(_literal(name) for name in names)}"] if names else ['name: "0"']),
        "NUMBER: /[0-9]{1,3}/",
    ]
    if arrays:
        rules += [
            f'quant: "forall {bound} :: " sum qlow {at} qhigh sum " ==> " qconj',
            'qlow: " <= " | " < "',
            'qhigh: " < " | " <= "',
            'qconj: qcmp ((" && " | " || ") qcmp)*',
            "qcmp: qsum cmpop qsum",
            'qsum: qterm ((" + " | " - ") qterm)*',
            'qterm: qatom ((" * " | " / " | " % ") qatom)*',
            f'qatom: name | {at} | NUMBER | "(" qsum ")" | coll "[" qidx "]" | "old(" coll "[" qidx "])"' + lengths,
            f'qidx: {at} ((" + " | " - ") atom)?',
            f"coll: {' | '.join(_literal(name) for name in arrays)}",
        ]
    if flags:
        rules.append(f"flag: {' | '.join(_literal(name) for name in flags)}")
    return Constraint(kind="lark", value="\n".join(rules) + "\n")


def parse_hints(reply: str, count: int, language: HintLanguage | None = None) -> dict[int, list[str]]:
    """Slot number (1-based) -> its hint lines; lines outside a block, or not hints, are ignored."""
    language = language or DAFNY
    hints: dict[int, list[str]] = {index: [] for index in range(1, count + 1)}
    marks = list(language.block.finditer(reply))
    for position, mark in enumerate(marks):
        slot = int(mark.group(1))
        end = marks[position + 1].start() if position + 1 < len(marks) else len(reply)
        if slot in hints:
            hints[slot] += [line.group().strip() for line in language.hint.finditer(reply[mark.end() : end])]
    return hints


def splice(program: str, slots: Sequence[Slot], hints: dict[int, list[str]]) -> str:
    """The program with each slot's hint lines between its loop condition and its body."""
    return splice_lines(program, slots, hints).code


@dataclass(frozen=True)
class Spliced:
    """A spliced program and where its parts landed (1-based lines), to map diagnostics back to hints."""

    code: str
    hints: dict[int, tuple[int, str]]
    """Line -> (slot, hint line)."""
    loops: dict[int, int]
    """Line of a slot's `while` -> the slot."""


def splice_lines(program: str, slots: Sequence[Slot], hints: dict[int, list[str]]) -> Spliced:
    """`splice`, remembering the line of every hint and of every loop's `while`."""
    out: list[str] = []
    where: dict[int, tuple[int, str]] = {}
    loops: dict[int, int] = {}
    last, line = 0, 1
    for index, slot in enumerate(slots, 1):
        lines = hints.get(index, [])
        head = program[last : slot.brace]
        if slot.keyword >= last:
            loops[line + head.count("\n", 0, slot.keyword - last)] = index
        if lines:
            head = head.rstrip()
            line += head.count("\n")
            for hint in lines:
                line += 1
                where[line] = (index, hint)
            head += "".join(f"\n{slot.indent}  {hint}" for hint in lines) + f"\n{slot.indent}"
            line += 1
        else:
            line += head.count("\n")
        out.append(head)
        last = slot.brace
    out.append(program[last:])
    return Spliced("".join(out), where, loops)


def render_hints(hints: dict[int, list[str]], language: HintLanguage | None = None) -> str:
    """Hint lines per slot as the model writes them (`// loop N` blocks), e.g. a solved task's answer shown as a
    few-shot turn."""
    language = language or DAFNY
    return "".join(
        f"{language.comment} loop {slot}\n" + "".join(f"{line}\n" for line in lines)
        for slot, lines in sorted(hints.items())
    )


def marked(program: str, slots: Sequence[Slot], language: HintLanguage | None = None) -> str:
    """The program as the prompt shows it: `// loop N` (the language's comment) where each block of hints goes."""
    language = language or DAFNY
    marks = {index: [f"{language.comment} loop {index}"] for index in range(1, len(slots) + 1)}
    return language.splice(program, slots, marks).code


EXAMPLE_PROGRAM = """method SumTo(n: int) returns (s: int)
  requires n >= 0
  ensures s == n * (n + 1) / 2
{
  s := 0;
  var i := 0;
  while i < n
    // loop 1
  {
    i := i + 1;
    s := s + i;
  }
}"""
EXAMPLE_HINTS = "// loop 1\ninvariant 0 <= i <= n\ninvariant s == i * (i + 1) / 2\ndecreases n - i\n"
ARRAY_PROGRAM = """method Scale(a: array<int>, f: int) returns (b: array<int>)
  ensures b.Length == a.Length
  ensures forall k :: 0 <= k < a.Length ==> b[k] == f * a[k]
{
  b := new int[a.Length];
  var j := 0;
  while j < a.Length
  {
    b[j] := f * a[j];
    j := j + 1;
  }
}"""
ARRAY_HINTS = "// loop 1\ninvariant 0 <= j <= a.Length\ninvariant forall k :: 0 <= k < j ==> b[k] == f * a[k]\n"
"""Two worked examples (not bench tasks): a counting loop and an array loop, so the model sees a quantified
invariant; they teach the annotation language, the task's hints are the model's own (its grammar admits only
the task's names)."""

HINTS_TURN = (
    "Here is a {title} program. Write the {kinds} that make {title} verify it, one "
    "block per marked loop, each block starting with its `{comment} loop N` line. Do not repeat the program.\n{program}"
)
REFINE_TURN = (
    "{title} did not verify the program with these hints:\n```\n{hints}```\nThe verifier reported:\n```\n{errors}\n"
    "```\n{blame}Write the hint blocks again: keep the invariants that held, replace or strengthen the failing "
    "ones, and add what is missing."
)


@dataclass(frozen=True)
class HintLanguage:
    """What hints infill needs to know about one verifier's language."""

    target: str
    """The verifier's name (and the prompt's code fence)."""
    title: str
    comment: str
    """Line comment: a block starts with `<comment> loop N`."""
    starts: tuple[str, ...]
    """How a hint line starts, per kind (invariant, decreases, assert): the lines a diagnostic can blame."""
    decreases: str
    """How a termination measure starts (Houdini keeps one per loop and replaces a blamed one)."""
    termination: re.Pattern[str]
    """A diagnostic on a loop's header line that blames its measure."""
    slots: Callable[[str], list[Slot]]
    grammar: Callable[[str, Sequence[Slot]], Constraint]
    splice: Callable[[str, Sequence[Slot], dict[int, list[str]]], Spliced]
    examples: tuple[tuple[str, str], ...]
    """(program without hints, its hint blocks): worked examples for the prompt, never bench tasks."""
    admits: Callable[[str, str], bool] = lambda program, line: True
    """Whether a parsed hint line may be spliced into `program` (a second check besides the grammar)."""
    kinds: str = "loop invariants and decreases clauses"
    """What the model writes, as the prompt names it."""

    @property
    def hint(self) -> re.Pattern[str]:
        return re.compile(
            r"^\s*(" + "|".join(re.escape(start) for start in self.starts) + r")" + self._edge + ".*$", re.M
        )

    @property
    def block(self) -> re.Pattern[str]:
        return re.compile(r"^\s*" + re.escape(self.comment) + r"\s*loop\s+(\d+)\s*$", re.M)

    @property
    def _edge(self) -> str:
        return r"\b" if self.starts[0][-1].isalnum() else ""


class HintsProblem(VerifierProblem):
    """A hints task searched over hint sets: replies are hint blocks, programs are the task's program spliced."""

    def __init__(
        self,
        *args: object,
        program_text: str,
        language: HintLanguage | None = None,
        exemplars: Sequence[tuple[str, str]] = (),
        **kwargs: object,
    ) -> None:
        """`exemplars`: (program without hints, its verified hint blocks) of solved tasks (the solved pool), shown
        after the language's worked examples."""
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.language = language = language or DAFNY
        self.base = program_text
        self.slots = language.slots(program_text)
        self.constraint = language.grammar(program_text, self.slots)
        self.root = [Message(role="system", content=f"You are an expert in {language.title} and formal verification.")]
        for example, hints in (*language.examples, *exemplars):
            self.root += [
                Message(role="user", content=self.turn(marked(example, language.slots(example), language))),
                Message(role="assistant", content=hints),
            ]
        self.root.append(Message(role="user", content=self.turn(marked(program_text, self.slots, language))))

    def turn(self, program: str) -> str:
        language = self.language
        return HINTS_TURN.format(
            title=language.title,
            kinds=language.kinds,
            comment=language.comment,
            program=fenced(program, language.target),
        )

    def hints(self, reply: str) -> dict[int, list[str]]:
        """The reply's hint lines per slot, those the language admits into this program."""
        parsed = parse_hints(reply, len(self.slots), self.language)
        return {
            slot: [line for line in lines if self.language.admits(self.base, line)] for slot, lines in parsed.items()
        }

    def program(self, reply: str) -> str:
        return self.language.splice(self.base, self.slots, self.hints(reply)).code

    def refine_messages(self, path: Sequence[Node]) -> list[Message]:
        node = path[-1]
        reply = node.completion.text if node.completion is not None else ""
        feedback = str(node.metadata.get("feedback", ""))
        blame = self.blame(node)
        return [
            *self.root,
            Message(role="assistant", content=reply),
            Message(
                role="user",
                content=REFINE_TURN.format(
                    title=self.language.title,
                    hints=reply if reply.endswith("\n") else reply + "\n",
                    errors=feedback,
                    blame=blame,
                ),
            ),
        ]

    def blame(self, node: Node) -> str:
        """The hint lines the verifier's diagnostics point at, so the model knows which to replace."""
        result = node.verify_result
        lines = (node.code or "").splitlines()
        failing = []
        for diagnostic in result.diagnostics if result is not None else []:
            if diagnostic.line is None or not 0 < diagnostic.line <= len(lines):
                continue
            text = lines[diagnostic.line - 1].strip()
            if text.startswith(self.language.starts):
                failing.append(f"- `{text}`: {diagnostic.message.strip()[:160]}")
        return ("Failing hints:\n" + "\n".join(dict.fromkeys(failing)) + "\n") if failing else ""


EXAMPLE_PROGRAM_BASE = EXAMPLE_PROGRAM.replace("    // loop 1\n", "")
EXAMPLE_SLOT = hint_slots(EXAMPLE_PROGRAM_BASE)[0]

DAFNY = HintLanguage(
    target="dafny",
    title="Dafny",
    comment="//",
    starts=("invariant", "decreases", "assert"),
    decreases="decreases",
    termination=re.compile(r"decrease|terminat", re.I),
    slots=hint_slots,
    grammar=hint_grammar,
    splice=splice_lines,
    examples=((EXAMPLE_PROGRAM_BASE, EXAMPLE_HINTS), (ARRAY_PROGRAM, ARRAY_HINTS)),
)
