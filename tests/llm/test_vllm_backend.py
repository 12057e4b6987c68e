"""The `vllm` backend: its mapping to and from vLLM's types, its one-line errors, and (on a GPU) the real engine."""

from __future__ import annotations

import importlib.util
import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from veriloop.config import load_settings
from veriloop.errors import BackendError
from veriloop.llm.base import get_backend
from veriloop.llm.vllm_backend import completion_from_output, sampling_kwargs
from veriloop.records import SamplingParams
from veriloop.testing import CLI, free_port, user

HAVE_VLLM = importlib.util.find_spec("vllm") is not None


def test_sampling_params_map_to_vllm_arguments() -> None:
    params = SamplingParams(n=4, temperature=0.7, top_p=0.95, max_tokens=64, stop=["```"], seed=9, logprobs=True)
    assert sampling_kwargs(params) == {
        "n": 4,
        "temperature": 0.7,
        "top_p": 0.95,
        "max_tokens": 64,
        "stop": ["```"],
        "seed": 9,
        "logprobs": 0,
    }
    plain = sampling_kwargs(SamplingParams())
    assert plain["stop"] is None
    assert "logprobs" not in plain


def test_outputs_become_completions() -> None:
    position = lambda token, value: {token: SimpleNamespace(logprob=value), 99: SimpleNamespace(logprob=-9.0)}  # noqa: E731
    output = SimpleNamespace(
        index=0, text="def f", token_ids=[5, 6], logprobs=[position(5, -0.1), position(6, -0.2)], finish_reason="length"
    )
    params = SamplingParams(logprobs=True)
    completion = completion_from_output(output, prompt_tokens=7, params=params, model="m", latency_s=0.5)
    assert (completion.text, completion.token_ids, completion.logprobs) == ("def f", [5, 6], [-0.1, -0.2])
    assert completion.finish_reason == "length"
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (7, 2)
    aborted = SimpleNamespace(index=1, text="", token_ids=[], logprobs=None, finish_reason="abort")
    assert completion_from_output(aborted, 7, SamplingParams(), "m", 0.0).finish_reason == "error"


@pytest.mark.slow
@pytest.mark.skipif(HAVE_VLLM, reason="vllm is installed here, so its absence cannot be shown")
def test_missing_vllm_is_a_one_line_backend_error(tmp_path: Path) -> None:
    with pytest.raises(BackendError, match=r"needs the gpu extra") as caught:
        get_backend(load_settings(llm={"backend": "vllm"}))
    assert "\n" not in str(caught.value)
    result = subprocess.run(
        [*CLI, "--home", str(tmp_path), "--backend", "vllm", "serve", "--port", str(free_port())],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == BackendError.exit_code
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("error: the vllm backend needs the gpu extra")


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(not HAVE_VLLM, reason="vllm is not installed (the gpu extra)")
@pytest.mark.skipif(
    "VERILOOP_TEST_VLLM_MODEL" not in os.environ, reason="set VERILOOP_TEST_VLLM_MODEL to a local model folder"
)
async def test_real_engine_generates() -> None:
    settings = load_settings(llm={"backend": "vllm", "model": os.environ["VERILOOP_TEST_VLLM_MODEL"]})
    backend = get_backend(settings)
    try:
        params = SamplingParams(n=2, temperature=0.8, max_tokens=16, seed=1, logprobs=True)
        chat, raw = await backend.generate([user("Write a Python function that adds two numbers."), "def add("], params)
    finally:
        await backend.aclose()
    for samples in (chat, raw):
        assert len(samples) == 2
        for completion in samples:
            assert completion.token_ids
            assert completion.logprobs is not None and len(completion.logprobs) == len(completion.token_ids)
            assert completion.usage.prompt_tokens > 0
            assert completion.finish_reason in ("stop", "length")
