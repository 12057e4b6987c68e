"""Batcher replicas: several continuous batchers over one model, one per core (tiny random llama; the
real model's replicas run in test_embedded_model.py and under `veriloop bench llm`)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from veriloop.config import load_settings
from veriloop.errors import BackendError
from veriloop.llm.batcher import ContinuousBatcher, SampleSpec
from veriloop.llm.embedded import EmbeddedBackend
from veriloop.llm.replicas import BatcherReplicas, replica_count, split_slots
from veriloop.records import SamplingParams

PROMPTS = ["def add(a, b):", "hello", "x" * 40, "The quick brown fox", "abc", "print('hi')\n" * 5, "z", "0123"]


def test_replica_count_gives_each_replica_at_least_four_slots() -> None:
    assert replica_count(0, 8, cores=2) == 2
    assert replica_count(0, 16, cores=2) == 2
    assert replica_count(0, 7, cores=2) == 1  # two replicas would keep 3 and 4 slots
    assert replica_count(0, 1, cores=2) == 1
    assert replica_count(0, 64, cores=16) == 16
    assert replica_count(0, 8, cores=1) == 1
    assert replica_count(3, 8, cores=1) == 3  # asked for: kept, whatever the cores
    assert replica_count(5, 2, cores=8) == 2  # never more replicas than slots
    assert replica_count(0, 16, threads=2, cores=2) == 1  # each replica's threads get their own cores
    assert replica_count(0, 16, threads=2, cores=4) == 2
    with pytest.raises(ValueError):
        replica_count(-1, 8)


def test_slots_split_evenly_first_replicas_larger() -> None:
    assert split_slots(8, 2) == [4, 4]
    assert split_slots(9, 2) == [5, 4]
    assert split_slots(10, 3) == [4, 3, 3]
    assert split_slots(8, 1) == [8]


def _replicas(tiny: tuple[Any, Any], slots: list[int]) -> BatcherReplicas:
    model, tokenizer = tiny
    first = ContinuousBatcher(model, tokenizer, max_batch_size=slots[0], eos_token_ids=())
    rest = [
        ContinuousBatcher(model, tokenizer, max_batch_size=count, eos_token_ids=(), decoder=first.decoder)
        for count in slots[1:]
    ]
    return BatcherReplicas([first, *rest])


def _ids(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text).input_ids)


def test_replicas_give_the_single_batchers_greedy_answers_and_share_the_work(tiny: tuple[Any, Any]) -> None:
    model, tokenizer = tiny
    lengths = [5, 30, 17, 40, 3, 25, 50, 12]
    single = ContinuousBatcher(model, tokenizer, max_batch_size=4, eos_token_ids=())
    pool = _replicas(tiny, [2, 2])
    try:
        expected = [
            single.submit(_ids(tokenizer, prompt), [SampleSpec(max_tokens=length)])[0].result(timeout=60).token_ids
            for prompt, length in zip(PROMPTS, lengths, strict=True)
        ]
        futures = [
            pool.submit(_ids(tokenizer, prompt), [SampleSpec(max_tokens=length)])[0]
            for prompt, length in zip(PROMPTS, lengths, strict=True)
        ]
        assert [future.result(timeout=60).token_ids for future in futures] == expected
        first, second = pool.replicas
        assert first.decoder is second.decoder  # one set of weight copies
        assert first.steps > 0 and second.steps > 0
        assert first.stats.decode_tokens + second.stats.decode_tokens == sum(lengths) - len(lengths)
        assert pool.stats.decode_tokens == sum(lengths) - len(lengths)
        assert pool.steps == first.steps + second.steps
        assert pool.max_batch_size == 4
        assert pool.active_rows == 0
    finally:
        single.close()
        pool.close()
    assert pool.closed


def test_one_request_at_a_time_stays_on_the_first_replica(tiny: tuple[Any, Any]) -> None:
    _, tokenizer = tiny
    pool = _replicas(tiny, [2, 2])
    try:
        for prompt in PROMPTS[:4]:
            pool.submit(_ids(tokenizer, prompt), [SampleSpec(max_tokens=4)])[0].result(timeout=60)
        assert pool.replicas[1].steps == 0
        # All samples of one prompt go to one replica (they share its prefill), the less loaded one.
        busy = pool.submit(_ids(tokenizer, PROMPTS[4]), [SampleSpec(max_tokens=30)] * 2)
        pair = pool.submit(_ids(tokenizer, PROMPTS[5]), [SampleSpec(max_tokens=4)] * 2)
        for future in busy + pair:
            future.result(timeout=60)
        assert pool.replicas[1].stats.decode_tokens == 2 * 3
    finally:
        pool.close()


def test_a_failed_prompt_frees_its_replica_for_the_next(tiny: tuple[Any, Any]) -> None:
    _, tokenizer = tiny
    pool = _replicas(tiny, [2, 2])
    try:
        [empty] = pool.submit([], [SampleSpec(max_tokens=4)])
        with pytest.raises(BackendError, match="empty"):
            empty.result(timeout=60)
        pool.submit(_ids(tokenizer, "hello"), [SampleSpec(max_tokens=4)])[0].result(timeout=60)
        assert pool.replicas[0].steps > 0 and pool.replicas[1].steps == 0
    finally:
        pool.close()
    [late] = pool.submit(_ids(tokenizer, "hello"), [SampleSpec(max_tokens=4)])
    with pytest.raises(BackendError, match="closed"):
        late.result(timeout=60)


def test_embedded_backend_builds_replicas_from_the_setting(tiny: tuple[Any, Any]) -> None:
    model, tokenizer = tiny
    backend = EmbeddedBackend(model, tokenizer, model_id="tiny", max_batch_size=8, eos_token_ids=[], replicas=2)
    try:
        assert isinstance(backend.batcher, BatcherReplicas)
        assert [replica.max_batch_size for replica in backend.batcher.replicas] == [4, 4]
        params = SamplingParams(temperature=0.0, max_tokens=6)
        results = asyncio.run(backend.generate(PROMPTS, params))
        assert len(results) == len(PROMPTS) and all(len(samples[0].token_ids) == 6 for samples in results)
    finally:
        backend.close()
    one = EmbeddedBackend(model, tokenizer, model_id="tiny", max_batch_size=8, eos_token_ids=[])
    try:
        assert isinstance(one.batcher, ContinuousBatcher)  # the constructor's default: one batcher
    finally:
        one.close()
    assert load_settings().llm.replicas == 0  # settings default: one per core
