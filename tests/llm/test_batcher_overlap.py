"""Prefill on its own thread (`overlap_prefill`) on the tiny llama: greedy outputs stay transformers' batch-1
greedy outputs, rows decode while a prompt is read, and nothing touches a slot the prefill thread writes."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import torch

from veriloop.llm.batcher import ContinuousBatcher, SampleSpec
from veriloop.llm.kv_cache import SlotKVCache


def encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text).input_ids)


def reference_greedy(model: Any, ids: Sequence[int], max_tokens: int) -> list[int]:
    with torch.inference_mode():
        out = model.generate(
            torch.tensor([list(ids)]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=max_tokens,
            do_sample=False,
            eos_token_id=None,
        )
    return [int(token) for token in out[0, len(ids) :]]


def on_prefill_thread() -> bool:
    return threading.current_thread().name.startswith("veriloop-prefill")


@pytest.fixture
def overlapped(tiny: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Batchers with the prefill thread, used whatever core share it gets (the tiny model's jobs are too
    short to measure it, and the test machine's other work must not switch it off)."""
    from veriloop.llm import batcher as module

    monkeypatch.setattr(module, "PREFILL_CORE_SHARE", 0.0)
    model, tokenizer = tiny
    made: list[ContinuousBatcher] = []

    def make(**options: Any) -> ContinuousBatcher:
        made.append(ContinuousBatcher(model, tokenizer, eos_token_ids=[], overlap_prefill=True, **options))
        return made[-1]

    yield make
    for item in made:
        item.close()


def slow_prefill_writes(batcher: ContinuousBatcher, seconds: float) -> None:
    """Make the prefill thread pause after each layer's cache write (a slow prompt, without a big model)."""
    cache = batcher.cache
    write = cache.write

    def slow(*args: Any) -> None:
        write(*args)
        if on_prefill_thread():
            time.sleep(seconds)

    cache.write = slow  # type: ignore[method-assign]


def test_greedy_equals_sequential_with_prefill_on_its_own_thread(tiny: tuple[Any, Any], overlapped: Any) -> None:
    """Prompts join while rows decode, rows leave and free slots take the next prompt, n=2 shares one
    prefill, a prompt reuses a cached prefix, logprobs are recorded: every greedy sample is still
    transformers' batch-1 greedy output, and no prompt token went through the worker's own forwards."""
    model, tokenizer = tiny
    batcher = overlapped(max_batch_size=3)
    assert batcher.overlap_prefill
    first_ids = encode(tokenizer, "abc")
    heard = threading.Event()
    first = batcher.submit(first_ids, [SampleSpec(max_tokens=40)], [lambda _: heard.set()])[0]
    assert heard.wait(60)
    system = "You are a careful assistant. Answer in code. " * 2
    jobs = [
        (encode(tokenizer, "The quick brown fox jumps over the lazy dog. " * 2), [SampleSpec(max_tokens=9)] * 2),
        (encode(tokenizer, system + "Task one"), [SampleSpec(max_tokens=25, logprobs=True)]),
        (encode(tokenizer, "z"), [SampleSpec(max_tokens=3)]),
        (encode(tokenizer, "print('hi')\n" * 6), [SampleSpec(max_tokens=14)] * 2),
    ]
    futures = [batcher.submit(ids, samples) for ids, samples in jobs]
    assert first.result(timeout=120).token_ids == reference_greedy(model, first_ids, 40)
    for (ids, samples), group in zip(jobs, futures, strict=True):
        reference = reference_greedy(model, ids, samples[0].max_tokens)
        for output in (future.result(timeout=120) for future in group):
            assert output.token_ids == reference and output.finish_reason == "length"
            if samples[0].logprobs:
                with torch.inference_mode():
                    logits = model(input_ids=torch.tensor([ids + reference])).logits[0].float()
                expected = torch.log_softmax(logits, dim=-1)
                wanted = [float(expected[len(ids) - 1 + i, t]) for i, t in enumerate(reference)]
                assert output.logprobs == pytest.approx(wanted, abs=1e-4)
    later_ids = encode(tokenizer, system + "Task two, longer")
    later = batcher.submit(later_ids, [SampleSpec(max_tokens=12)])[0].result(timeout=120)
    assert later.token_ids == reference_greedy(model, later_ids, 12)
    assert batcher.prefix_hits >= len(encode(tokenizer, system)) - 1
    stats = batcher.stats
    assert stats.mixed_steps == 0 and stats.prefill_jobs >= 2
    assert stats.prefill_tokens == len(first_ids) + sum(len(ids) for ids, _ in jobs) + len(later_ids) - (
        batcher.prefix_hits
    )
    assert batcher.active_rows == 0


def test_rows_decode_while_a_prompt_is_prefilled(tiny: tuple[Any, Any], overlapped: Any) -> None:
    model, tokenizer = tiny
    batcher = overlapped(max_batch_size=2)
    slow_prefill_writes(batcher, 0.05)
    during: list[bool] = []

    def heard(_: str) -> None:  # on the worker thread, as the running row takes each token
        job = batcher._job
        during.append(job is not None and not job.future.done())

    running_ids = encode(tokenizer, "running")
    running = batcher.submit(running_ids, [SampleSpec(max_tokens=60)], [heard])[0]
    deadline = time.monotonic() + 60
    while not during and time.monotonic() < deadline:
        time.sleep(0.001)
    long_ids = torch.randint(3, 259, (300,), generator=torch.Generator().manual_seed(2)).tolist()
    joined = batcher.submit(long_ids, [SampleSpec(max_tokens=5)])[0]
    assert running.result(timeout=120).token_ids == reference_greedy(model, running_ids, 60)
    assert joined.result(timeout=120).token_ids == reference_greedy(model, long_ids, 5)
    assert sum(during) >= 3  # the running row took tokens while the prompt was being read


def test_the_cache_grows_only_when_no_prefill_job_runs(tiny: tuple[Any, Any], overlapped: Any) -> None:
    """Growing reallocates the buffers; a job writing into the old ones meanwhile would lose its columns."""
    model, tokenizer = tiny
    batcher = overlapped(max_batch_size=2)
    cache = batcher.cache
    assert isinstance(cache, SlotKVCache)
    slow_prefill_writes(batcher, 0.2)
    ensure = cache.ensure
    grew_during_job: list[bool] = []

    def checked(columns: int) -> None:
        job = batcher._job
        if columns > cache.capacity:
            grew_during_job.append(job is not None and not job.future.done())
        ensure(columns)

    cache.ensure = checked  # type: ignore[method-assign]
    running_ids = encode(tokenizer, "grow")
    started = threading.Event()
    running = batcher.submit(running_ids, [SampleSpec(max_tokens=400)], [lambda _: started.set()])[0]
    assert started.wait(60)
    joined_ids = encode(tokenizer, "a prompt that joins " * 3)
    joined = []
    while not running.done():  # keep a prompt in the prefill thread while the row crosses the capacity
        joined.append(batcher.submit(joined_ids, [SampleSpec(max_tokens=2)])[0])
        joined[-1].result(timeout=120)
    assert running.result(timeout=120).token_ids == reference_greedy(model, running_ids, 400)
    assert all(future.result().token_ids == reference_greedy(model, joined_ids, 2) for future in joined[:1])
    assert cache.grows >= 2 and grew_during_job and not any(grew_during_job)


def test_a_prompt_cancelled_in_the_prefill_thread_keeps_its_slot_until_the_job_ends(
    tiny: tuple[Any, Any], overlapped: Any
) -> None:
    """Two slots, one held by a decoding row: a prompt that reuses a cached prefix would copy it into the
    slot the cancelled prompt's job still writes, unless that slot stays held until the job ends; its
    output shows whether the columns were clobbered."""
    model, tokenizer = tiny
    batcher = overlapped(max_batch_size=2)
    shared = "shared context that is long enough to be reused " * 2
    first_ids = encode(tokenizer, shared + "one")
    assert batcher.submit(first_ids, [SampleSpec(max_tokens=3)])[0].result(timeout=60).token_ids == (
        reference_greedy(model, first_ids, 3)
    )
    started = threading.Event()
    running = batcher.submit(encode(tokenizer, "keep going"), [SampleSpec(max_tokens=600)], [lambda _: started.set()])
    assert started.wait(60)
    slow_prefill_writes(batcher, 0.2)
    doomed = batcher.submit(torch.arange(3, 200).tolist(), [SampleSpec(max_tokens=50)])[0]
    deadline = time.monotonic() + 60
    while batcher._job is None and time.monotonic() < deadline:
        time.sleep(0.001)
    assert batcher._job is not None
    doomed.cancel()
    later_ids = encode(tokenizer, shared + "two")
    later = batcher.submit(later_ids, [SampleSpec(max_tokens=8)])[0].result(timeout=120)
    assert later.token_ids == reference_greedy(model, later_ids, 8)
    assert batcher.prefix_hits > 0
    running[0].cancel()
    deadline = time.monotonic() + 10
    while batcher.active_rows and time.monotonic() < deadline:
        time.sleep(0.01)
    assert batcher.active_rows == 0


def test_without_a_free_core_prompts_are_read_in_the_decode_steps(
    tiny: tuple[Any, Any], overlapped: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A prefill thread that gets no core of its own only time-shares with the decode steps; then the
    joining prompts ride in the decode steps (mixed steps), and the thread is tried again now and then."""
    from veriloop.llm import batcher as module

    monkeypatch.setattr(module, "PREFILL_CORE_SHARE", 2.0)  # no job ever counts as having had a core
    monkeypatch.setattr(module, "PREFILL_PROBE_STEPS", 4)
    model, tokenizer = tiny
    batcher = overlapped(max_batch_size=2, prefill_chunk=8)
    running_ids = encode(tokenizer, "running")
    started = threading.Event()
    running = batcher.submit(running_ids, [SampleSpec(max_tokens=80)], [lambda _: started.set()])[0]
    assert started.wait(60)
    jobs_before = batcher.stats.prefill_jobs
    joined_ids = encode(tokenizer, "a prompt that joins while the other row decodes " * 2)
    joined = batcher.submit(joined_ids, [SampleSpec(max_tokens=6)])[0]
    assert running.result(timeout=120).token_ids == reference_greedy(model, running_ids, 80)
    assert joined.result(timeout=120).token_ids == reference_greedy(model, joined_ids, 6)
    stats = batcher.stats
    assert stats.mixed_steps >= 3  # 8-token chunks beside the decoding row
    assert stats.prefill_jobs > jobs_before  # ... and a try of the thread after 4 steps that would have mixed
    assert stats.prefill_tokens == len(running_ids) + len(joined_ids)
