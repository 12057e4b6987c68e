"""Constrained decoding: every sample matches its constraint, and a mask never changes a greedy output that
already matched (fast: the tiny byte-level llama; the embedded model is in test_constraints_model.py)."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from veriloop.errors import ConfigError
from veriloop.llm.batcher import ContinuousBatcher, SampleSpec
from veriloop.llm.codeblocks import block_rest, extract_code, fenced_block
from veriloop.llm.constraints import ConstraintEngine, mask_rows, validate
from veriloop.records import Constraint, SamplingParams

EOS = 2


@pytest.fixture(scope="module")
def engine(tiny: tuple[Any, Any]) -> ConstraintEngine:
    return ConstraintEngine(tiny[1], tiny[0].config.vocab_size)


@pytest.fixture(scope="module")
def batcher(tiny: tuple[Any, Any]) -> Any:
    made = ContinuousBatcher(tiny[0], tiny[1], max_batch_size=4, eos_token_ids=[EOS])
    yield made
    made.close()


def walk(engine: ConstraintEngine, tokenizer: Any, constraint: Constraint, seed: int, steps: int = 400) -> str | None:
    """Sample from random logits under the mask until the constraint ends; None if it never did."""
    matcher = engine.matcher(constraint)
    generator = torch.Generator().manual_seed(seed)
    tokens: list[int] = []
    for _ in range(steps):
        logits = torch.randn(1, engine.vocab_size, generator=generator) * 3
        mask_rows(logits, [matcher])
        token = int(torch.multinomial(torch.softmax(logits[0], -1), 1, generator=generator))
        assert matcher.advance(token), matcher.error
        tokens.append(token)
        if token == EOS or matcher.finished:
            return str(tokenizer.decode([t for t in tokens if t != EOS]))
    return None


# --------------------------------------------------------------------------- random regexes

_atoms = st.sampled_from(["a", "b", "c", "0", "1", " ", "[a-c]", "[0-9]", "x", "\\.", "\\("])


def _regex() -> st.SearchStrategy[str]:
    def extend(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        return st.one_of(
            st.lists(inner, min_size=2, max_size=4).map("".join),
            st.lists(inner, min_size=2, max_size=3).map(lambda parts: "(" + "|".join(parts) + ")"),
            st.tuples(inner, st.integers(0, 2), st.integers(0, 3)).map(lambda t: f"({t[0]}){{{t[1]},{t[1] + t[2]}}}"),
            inner.map(lambda part: f"({part})?"),
        )

    return st.recursive(_atoms, extend, max_leaves=8)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pattern=_regex(), seed=st.integers(0, 2**16))
def test_random_regex_samples_always_match(
    engine: ConstraintEngine, tiny: tuple[Any, Any], pattern: str, seed: int
) -> None:
    text = walk(engine, tiny[1], Constraint(kind="regex", value=pattern), seed)
    assert text is not None, "a bounded regex must end"
    assert re.fullmatch(pattern, text), (pattern, text)


# --------------------------------------------------------------------------- random JSON Schemas

_leaf = st.one_of(
    st.just({"type": "integer"}),
    st.just({"type": "boolean"}),
    st.just({"type": "null"}),
    st.integers(0, 6).map(lambda n: {"type": "string", "maxLength": n}),
    st.lists(st.sampled_from(["red", "green", "a b", 'q"t']), min_size=1, max_size=3, unique=True).map(
        lambda values: {"enum": values}
    ),
)


def _schema() -> st.SearchStrategy[dict[str, Any]]:
    def extend(inner: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
        objects = st.dictionaries(st.sampled_from(["k", "name", "n2", "x_y"]), inner, min_size=1, max_size=3).map(
            lambda props: {
                "type": "object",
                "properties": props,
                "required": sorted(props),
                "additionalProperties": False,
            }
        )
        arrays = st.tuples(inner, st.integers(0, 3)).map(lambda t: {"type": "array", "items": t[0], "maxItems": t[1]})
        return st.one_of(objects, arrays)

    return st.recursive(_leaf, extend, max_leaves=6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schema=_schema(), seed=st.integers(0, 2**16))
def test_random_json_schema_samples_validate(
    engine: ConstraintEngine, tiny: tuple[Any, Any], schema: dict[str, Any], seed: int
) -> None:
    text = walk(engine, tiny[1], Constraint(kind="json_schema", value=json.dumps(schema)), seed, steps=800)
    assert text is not None
    jsonschema.validate(json.loads(text), schema)


# --------------------------------------------------------------------------- grammars

LARK = r"""
start: stmt+
stmt: NAME " = " expr ";\n"
expr: term (" + " term)*
term: NAME | NUMBER | "(" expr ")"
NAME: /[a-z]{1,3}/
NUMBER: /[0-9]{1,2}/
"""
LARK_CHECK = re.compile(
    r"(?:[a-z]{1,3} = (?:[a-z]{1,3}|[0-9]{1,2}|\(.*\))(?: \+ (?:[a-z]{1,3}|[0-9]{1,2}|\(.*\)))*;\n)+"
)
GBNF = 'root ::= answer "."\nanswer ::= "yes" | "no" | "maybe " [0-9]'


@pytest.mark.parametrize("seed", range(12))
def test_lark_and_gbnf_samples_parse(engine: ConstraintEngine, tiny: tuple[Any, Any], seed: int) -> None:
    lark = walk(engine, tiny[1], Constraint(kind="lark", value=LARK), seed, steps=600)
    if lark is not None:  # stmt+ may run on for ever on random logits
        assert LARK_CHECK.fullmatch(lark), lark
        assert lark.count("(") == lark.count(")")
    gbnf = walk(engine, tiny[1], Constraint(kind="gbnf", value=GBNF), seed)
    assert gbnf is not None and re.fullmatch(r"(yes|no|maybe [0-9])\.", gbnf), gbnf


@pytest.mark.parametrize(
    "constraint",
    [
        Constraint(kind="regex", value="[0-9"),
        Constraint(kind="json_schema", value="{not json"),
        Constraint(kind="json_schema", value="[1, 2]"),
        Constraint(kind="lark", value="start: undefined_rule"),
        Constraint(kind="gbnf", value="root ::= undefined-rule"),
    ],
)
def test_bad_constraints_are_config_errors(engine: ConstraintEngine, constraint: Constraint) -> None:
    with pytest.raises(ConfigError, match="constraint"):
        engine.matcher(constraint)
    with pytest.raises(ConfigError):
        validate(constraint)


def test_mask_forbids_columns_past_the_tokenizer(engine: ConstraintEngine) -> None:
    matcher = engine.matcher(Constraint(kind="regex", value="a"))
    logits = torch.zeros(2, engine.vocab_size + 7)
    mask_rows(logits, [None, matcher])
    assert torch.isfinite(logits[0]).all()  # the unconstrained row is untouched
    allowed = torch.isfinite(logits[1]).nonzero().flatten().tolist()
    assert len(allowed) == 1 and all(index < engine.vocab_size for index in allowed)


# --------------------------------------------------------------------------- in the continuous batcher


def test_batcher_rows_with_different_constraints_n_logprobs_and_stops(tiny: tuple[Any, Any], batcher: Any) -> None:
    tokenizer = tiny[1]
    ids = list(tokenizer("def f(x):").input_ids)
    phone = Constraint(kind="regex", value=r"\d{3}-\d{4}")
    choice = Constraint(kind="gbnf", value='root ::= "yes" | "no"')
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}},
        "required": ["a"],
        "additionalProperties": False,
    }
    objects = Constraint(kind="json_schema", value=json.dumps(schema))
    futures = batcher.submit(
        ids,
        [SampleSpec(max_tokens=40, temperature=1.0, seed=seed, logprobs=True, constraint=phone) for seed in range(3)]
        + [SampleSpec(max_tokens=40, constraint=choice), SampleSpec(max_tokens=40)],
    )
    futures += batcher.submit(ids, [SampleSpec(max_tokens=60, temperature=0.7, seed=9, constraint=objects)])
    futures += batcher.submit(
        ids, [SampleSpec(max_tokens=40, temperature=1.0, seed=4, stop=("-",), constraint=phone, logprobs=True)]
    )
    outputs = [future.result(timeout=120) for future in futures]
    for output in outputs[:3]:
        assert re.fullmatch(r"\d{3}-\d{4}", output.text), output.text
        assert output.finish_reason == "stop"
        assert output.logprobs is not None and len(output.logprobs) == len(output.token_ids)
        assert all(value <= 0.0 and value > float("-inf") for value in output.logprobs)
    assert len({output.text for output in outputs[:3]}) > 1, "n > 1 samples are drawn independently"
    assert outputs[3].text in ("yes", "no")
    assert json.loads(outputs[5].text).keys() == {"a"}
    assert re.fullmatch(r"\d{3}", outputs[6].text), outputs[6].text  # the stop string still ends the row


def test_bad_constraint_fails_only_its_request(tiny: tuple[Any, Any], batcher: Any) -> None:
    ids = list(tiny[1]("x").input_ids)
    bad = batcher.submit(ids, [SampleSpec(max_tokens=4, constraint=Constraint(kind="regex", value="(a"))])
    good = batcher.submit(ids, [SampleSpec(max_tokens=4)])
    with pytest.raises(ConfigError):
        bad[0].result(timeout=60)
    assert good[0].result(timeout=60).finish_reason == "length"


def test_mask_keeps_greedy_output_that_already_matches(tiny: tuple[Any, Any], batcher: Any) -> None:
    """The tiny model emits random bytes; each prompt is compared over its longest valid-UTF-8 greedy prefix."""
    tokenizer = tiny[1]
    compared = 0
    for prompt in ["def add(a, b):", "hello", "The quick brown fox jumps", "abc", "0123456789", "z"]:
        ids = list(tokenizer(prompt).input_ids)
        free = batcher.submit(ids, [SampleSpec(max_tokens=16)])[0].result(timeout=60)
        keep = len(free.token_ids)
        while keep and "\ufffd" in tokenizer.decode(free.token_ids[:keep]):
            keep -= 1
        if not keep:
            continue
        compared += keep
        text = tokenizer.decode(free.token_ids[:keep])
        literal = re.escape(text)
        for pattern in (literal, f"({literal}|zzz)", r"(?s:.{0,400})"):
            spec = SampleSpec(max_tokens=keep, constraint=Constraint(kind="regex", value=pattern))
            out = batcher.submit(ids, [spec])[0].result(timeout=60)
            assert out.token_ids == free.token_ids[:keep], (prompt, pattern)
            assert out.text == text
    assert compared >= 8, "too few valid tokens to compare: pick other prompts"


def test_sampling_params_carry_the_constraint() -> None:
    params = SamplingParams(constraint=Constraint(kind="lark", value='start: "x"'))
    assert SamplingParams.model_validate_json(params.model_dump_json()) == params
    assert SamplingParams().constraint is None


FENCED = [
    ("```python\nimport math\ndef add(a, b):\n    return a + `b`\n```", True),
    ("```python\ndef add(a):\n```", True),
    ("```python\ndef sub(a):\n```", False),  # not the function the task asks for
    ("Sure! Here it is:\n```python\ndef add(a):\n```", False),  # prose first
    ("```python\ndef add(x)\n```\n```python\n```", False),  # a second block
    ("```cpp\nint add(int a);\n```", False),  # another language
]


@pytest.mark.parametrize(("text", "allowed"), FENCED)
def test_a_fenced_block_constraint_admits_one_block_with_the_signature(
    engine: ConstraintEngine, tiny: tuple[Any, Any], text: str, allowed: bool
) -> None:
    """What the methods ask the model for (`fenced_block`), checked token by token as the batcher applies it."""
    constraint = fenced_block("python", "def add(")
    matcher = engine.matcher(constraint)
    tokens = tiny[1].encode(text, add_special_tokens=False)
    consumed = all(matcher.advance(token) for token in tokens)
    assert (consumed and matcher.accepting) is allowed
    assert bool(re.fullmatch(constraint.value, text)) is allowed
    if allowed:
        assert "def add(" in extract_code(text, "python")


@pytest.mark.parametrize(("text", "allowed"), FENCED)
def test_the_rest_of_an_opened_block_is_the_fenced_block_without_its_opening(
    engine: ConstraintEngine, tiny: tuple[Any, Any], text: str, allowed: bool
) -> None:
    """`block_rest` (the prompt already opened the fence) admits exactly what follows a fenced block's opening."""
    opening = "```python\n"
    rest = block_rest("def add(")
    assert fenced_block("python", "def add(").value.endswith(rest.value)
    if text.startswith(opening):
        matcher = engine.matcher(rest)
        consumed = all(
            matcher.advance(token) for token in tiny[1].encode(text[len(opening) :], add_special_tokens=False)
        )
        assert (consumed and matcher.accepting) is allowed
        assert bool(re.fullmatch(rest.value, text[len(opening) :])) is allowed
    assert re.fullmatch(rest.value, "def add(a):\n``` and prose after") is None
