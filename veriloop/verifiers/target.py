"""A verifier's target descriptor: what the rest of veriloop needs to know about the language it checks.

Each verifier module declares one beside its class (`target = VerifierTarget(...)` as a class attribute), and
the verifier is registered with one line in `VERIFIERS` (`verifiers/base.py`). The guard takes its dialect
from the descriptor, `veriloop verify` the candidates' language, the task suites the language of the
programs they ask for, and AlphaVerus its fences, spec clause syntax and prompt fragments, so none of them
lists the verifiers it knows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import AfterValidator, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from veriloop.errors import ConfigError
from veriloop.verifiers.base import VERIFIERS
from veriloop.verifiers.lexer import python_blank_comments
from veriloop.verifiers.spec import blank_comments

if TYPE_CHECKING:
    from veriloop.verifiers.guard import Dialect


@dataclass(frozen=True)
class VerifierTarget:
    """One verifier's language, as the guard, the CLI, the task suites and AlphaVerus read it."""

    name: str
    """The verifier's name in `VERIFIERS`."""
    language: str | None = None
    """The language candidates are written in (`Task.language`); None: the task's own (the `tests` verifier)."""
    title: str = ""
    """How prompts name the language: "Nagini (Python with nagini_contracts)"."""
    fence: str = ""
    """The info string of a code block in this language."""
    dialect: Dialect | None = None
    """The spec guard's rules for this language; None: nothing to guard (the `tests` verifier)."""
    ensures: str | None = None
    """A postcondition clause, as a pattern (AlphaVerus's rule: a spec with one must keep one)."""
    comments: Callable[[str], str] = blank_comments
    """The code with its comments blanked out, line for line."""
    declarations: str | None = None
    """A line that starts a top-level declaration, as a pattern: a reply without a code block is cut there."""
    exploit_kinds: tuple[str, ...] = ()
    """Declaration kinds whose body AlphaVerus's exploit model replaces (the last one with a contract)."""
    shape: str = ""
    """Prompt fragment: what a complete program must contain (imports, a `main`), after the translation ask."""
    exploit_example: tuple[str, str] | None = None
    """(spec prefix, trivial body): the example the exploit model's prompt shows."""
    rules: tuple[tuple[str, str], ...] = ()
    """(pattern, message): AlphaVerus's language-specific syntactic rules on the code without comments."""
    suite: str | None = None
    """The suite `veriloop run alphaverus --target NAME` runs when no --suite is given."""
    solve_mode: Literal["hints", "inference"] = "inference"
    """How `veriloop solve` asks AlphaVerus to prove a lone program in this language: `hints` fills in its
    annotations (DafnyBench's task, as Dafny's default suite poses it), `inference` completes it in place."""

    @property
    def layout(self) -> Literal["braces", "indent"]:
        """Bodies are `{ ... }` blocks or indented lines (the dialect's; braces without one)."""
        return self.dialect.layout if self.dialect is not None else "braces"


def hash_comments(code: str) -> str:
    """Python code with its `#` comments removed, line for line, as Python's tokenizer reads them (a `#` inside a
    string is not a comment)."""
    return "\n".join(line.rstrip() for line in python_blank_comments(code).splitlines())


def verifier_target(name: str) -> VerifierTarget:
    """The descriptor of the verifier registered as `name` (imports its module; unknown names list the rest).

    The registry imports by name, so mypy cannot see what a registry line points at: a class without a descriptor
    fails here with what it lacks rather than later with an AttributeError."""
    target = getattr(VERIFIERS.load(name), "target", None)
    if not isinstance(target, VerifierTarget):
        raise ConfigError(f"verifier {name!r} declares no target descriptor (a `target = VerifierTarget(...)`)")
    return target


def registered(name: str | None) -> str | None:
    """`name` when it is None or a registered verifier (no import), else a ValueError naming the ones there are."""
    if name is not None and name not in VERIFIERS:
        raise ValueError(f"unknown verifier {name!r}; registered: {', '.join(VERIFIERS)}")
    return name


class _RegisteredNames:
    """`Annotated` metadata: the JSON schema lists the verifiers registered when it is built, as `registered` does."""

    def __get_pydantic_json_schema__(self, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return {"anyOf": [{"type": "string", "enum": list(VERIFIERS)}, {"type": "null"}]}


VerifierChoice = Annotated[str | None, AfterValidator(registered), _RegisteredNames()]
"""An options or task field naming a verifier, or None: any registered name, checked when the model is validated
(so the field's type stays a plain `str | None` for the generated CLI flags; its JSON schema is the enum of names)."""


def formal_verifiers() -> list[str]:
    """The registered verifiers that check a specification (their descriptor has a guard dialect)."""
    return [name for name in VERIFIERS if verifier_target(name).dialect is not None]


def proof_verifier(language: str) -> str | None:
    """The formal verifier whose candidates are written in `language` (the first registered), or None."""
    return next((name for name in formal_verifiers() if verifier_target(name).language == language), None)
