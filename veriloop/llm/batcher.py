"""Continuous batching for a causal language model, on one dedicated worker thread.

Callers on any thread (or event loop) submit a prompt with one or more samples and get one
`concurrent.futures.Future` per sample. The worker owns the model: every decode step runs one
`forward` for all active rows together, and a row that finishes (EOS, stop string, length) leaves
the batch at once so a waiting row takes its slot. One long generation never holds the others back.

KV-cache scheme (why it looks like this):

* One preallocated buffer per layer of shape (rows, kv_heads, capacity, head_dim). All rows end at
  the same column `length`, so a decode step writes one new column for every row in place. Hugging
  Face's DynamicCache instead `torch.cat`s the whole cache on every step, which at batch 8 and a few
  hundred tokens copies about as many bytes as the weights themselves.
* A joining prompt is prefilled alone (batch 1, no padding, logits of the last position only), so
  its prompt pass is what a sequential run computes, and the n samples of one request share that
  one prefill. The prompts of the last few prefills are kept (`prefix_cache_bytes`); a new prompt
  that starts with the same tokens (a shared system prompt or few-shot block, the earlier turns of
  a conversation) reuses their keys and values and prefills only the rest. On two CPU cores a
  170-token prefill costs about as much as ten decode steps, so this matters.
* The prompt's keys and values are copied right-aligned into a free slot (left padding); columns
  before a row's start are masked out. Rotary embeddings are applied before caching, so keys stay
  valid wherever they sit; position ids are tracked per row.
* A finished row's slot is refilled in place when a waiting row fits; otherwise the buffers are
  rebuilt: leftover slots are dropped from the batch dimension, columns no row uses any more are cut
  off the front, and the capacity grows in chunks. Rebuilds copy the cache once, which is rare
  compared with steps.

With `speculative` set, prompts of at least `min_tokens` tokens are prefilled by SpecPrefill
(`veriloop.kernels.specprefill`): the first layers of the model score the prompt's tokens, and only
the top chunks are prefilled, at their original positions. The row's cache then holds fewer
columns than the prompt has tokens; positions still continue from the prompt's length. Such
partial prefixes are not kept for prefix reuse.

On the CPU the batcher stores the model's Linear weights column-major (`column_major_linears`):
same values, faster small-batch matrix products.

Greedy rows take the arg-max of their own logits and sampled rows draw from their own seeded
generator, so what a request gets does not depend on what else shares the batch (up to float
rounding differences between batch shapes, which only matter at exact ties).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import copy
import inspect
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer

from veriloop.errors import BackendError, ConfigError
from veriloop.llm.constraints import ConstraintEngine, RowMatcher, mask_rows, masked
from veriloop.records import Constraint

log = logging.getLogger(__name__)

FinishReason = Literal["stop", "length"]

_CAPACITY_CHUNK = 128
"""Columns added whenever the cache buffers grow; a rebuild copies the cache, so grow in chunks."""

_COMPACT_AT = 256
"""Rebuild once this many leading columns are unused by every row (they still cost attention)."""

_MIN_PREFIX_REUSE = 8
"""Shared prefixes shorter than this are simply prefilled again."""


@dataclass(frozen=True)
class SpeculativePrefill:
    """SpecPrefill for long prompts: keep `keep_ratio` of the chunks a `speculator_layers`-layer early exit ranks."""

    keep_ratio: float = 0.3
    min_tokens: int = 512
    speculator_layers: int = 8
    chunk_size: int = 32
    look_ahead: int = 8


@dataclass(frozen=True)
class SampleSpec:
    """How to produce one sample; a request with n samples submits n specs for one prompt."""

    max_tokens: int
    temperature: float = 0.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    logprobs: bool = False
    constraint: Constraint | None = None
    """Structure the sample must match, enforced as a token mask every step (`veriloop.llm.constraints`)."""


@dataclass(frozen=True)
class RowOutput:
    """One finished sample.

    `token_ids` are the tokens of `text` (EOS and the tokens of a matched stop string excluded; a token
    that straddles the start of a stop string is dropped, so `text` may hold a few characters past
    the decoded `token_ids`). `generated_tokens` counts every token the model produced for the row.
    `logprobs` are log-softmax values of the model logits (before temperature and top-p; after a
    constraint's mask, so they are the probabilities the row was actually sampled from).
    """

    token_ids: list[int]
    logprobs: list[float] | None
    text: str
    finish_reason: FinishReason
    generated_tokens: int
    prompt_tokens: int
    latency_s: float


@dataclass(eq=False)
class _Row:
    spec: SampleSpec
    future: concurrent.futures.Future[RowOutput]
    generator: torch.Generator | None
    prompt_len: int
    submitted: float
    max_tokens: int = 0
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    start: int = 0
    matcher: RowMatcher | None = None

    @property
    def position(self) -> int:
        """Position id of the last sampled token, the one fed to the next step."""
        return self.prompt_len + len(self.tokens) - 1


@dataclass(eq=False)
class _Group:
    """One prompt and its samples still waiting for a slot; the prefill is shared by all of them."""

    prompt_ids: list[int]
    pending: deque[_Row]
    prefix: list[tuple[torch.Tensor, torch.Tensor]] | None = None
    first_logits: torch.Tensor | None = None

    @property
    def width(self) -> int:
        """Cache columns of the prefilled prompt: its length, or fewer after SpecPrefill."""
        return int(self.prefix[0][0].shape[2]) if self.prefix else len(self.prompt_ids)


class _ColumnLayer(DynamicLayer):
    """A cache layer over a preallocated buffer: `update` writes the new columns in place and returns views."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, length: int) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.buffers = (keys, values)
        self.keys, self.values = keys, values
        self.length = length
        self.is_initialized = True
        self.device = keys.device

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
    ) -> tuple[torch.Tensor, torch.Tensor]:
        keys, values = self.buffers
        end = self.length + key_states.shape[-2]
        keys[:, :, self.length : end] = key_states
        values[:, :, self.length : end] = value_states
        self.length = end
        return keys[:, :, :end], values[:, :, :end]

    def get_seq_length(self) -> int:
        return self.length


class ContinuousBatcher:
    """Decodes many rows together on a worker thread; `submit` is safe from any thread."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        max_batch_size: int = 8,
        torch_threads: int = 1,
        eos_token_ids: Sequence[int] | None = None,
        prefix_cache_bytes: int = 256 << 20,
        speculative: SpeculativePrefill | None = None,
        name: str = "veriloop-batcher",
    ) -> None:
        if max_batch_size < 1:
            raise ValueError("max_batch_size must be at least 1")
        self.model = model
        # The worker decodes with its own copy: a fast tokenizer must not be used by two threads at once.
        self._tokenizer = copy.deepcopy(tokenizer)
        self.max_batch_size = max_batch_size
        self.torch_threads = torch_threads
        self.eos_token_ids = frozenset(
            eos_token_ids if eos_token_ids is not None else default_eos_ids(model, tokenizer)
        )
        self.max_context = int(getattr(model.config, "max_position_embeddings", 0) or 1 << 30)
        self.device = next(model.parameters()).device
        self.dtype = next(model.parameters()).dtype
        if self.device.type == "cpu":
            column_major_linears(model)
        self.steps = 0
        """Decode steps run so far (for tests and benchmarks)."""
        self.rebuilds = 0
        """Times the cache buffers were rebuilt (joins that could not reuse a slot, growth, compaction)."""
        self.prefix_hits = 0
        """Prompt tokens whose prefill was skipped because a recent prompt began the same way."""
        self.prefix_cache_bytes = prefix_cache_bytes
        self.speculative = speculative
        self.speculative_prefills = 0
        """Prompts prefilled by SpecPrefill (for tests and benchmarks)."""
        self._prefix_bytes = 0
        self._prefixes: OrderedDict[tuple[int, ...], list[tuple[torch.Tensor, torch.Tensor]]] = OrderedDict()
        self._constraints: ConstraintEngine | None = None
        # transformers renamed `past_key_values` to `cache` in 5.2x; pass whichever this version's forward takes.
        parameters = inspect.signature(model.forward).parameters
        self._cache_kwarg = "cache" if "cache" in parameters else "past_key_values"

        self._cond = threading.Condition()
        self._waiting: deque[_Group] = deque()
        self._closed = False
        # Batch state, touched only by the worker thread.
        self._rows: list[_Row | None] = []
        self._keys: list[torch.Tensor] = []
        self._values: list[torch.Tensor] = []
        self._mask = torch.zeros((0, 0), dtype=torch.bool, device=self.device)
        self._length = 0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ public API

    def submit(
        self, prompt_ids: Sequence[int], samples: Sequence[SampleSpec]
    ) -> list[concurrent.futures.Future[RowOutput]]:
        """Queue one prompt with its samples; each future resolves to a RowOutput or a BackendError."""
        now = time.perf_counter()
        rows = [
            _Row(
                spec=spec,
                future=concurrent.futures.Future(),
                generator=_generator(spec.seed) if spec.temperature > 0 else None,
                prompt_len=len(prompt_ids),
                submitted=now,
            )
            for spec in samples
        ]
        futures = [row.future for row in rows]
        if not prompt_ids:
            _fail(rows, BackendError("the prompt is empty: nothing to condition on"))
            return futures
        if len(prompt_ids) >= self.max_context:
            _fail(rows, BackendError(f"prompt has {len(prompt_ids)} tokens; the model's context is {self.max_context}"))
            return futures
        for row in rows:
            row.max_tokens = min(row.spec.max_tokens, self.max_context - len(prompt_ids))
        try:
            for row in rows:
                row.matcher = self._matcher(row.spec.constraint)
        except ConfigError as exc:
            _fail(rows, exc)
            return futures
        with self._cond:
            if self._closed:
                _fail(rows, BackendError("the batcher is closed"))
                return futures
            self._waiting.append(_Group(prompt_ids=list(prompt_ids), pending=deque(rows)))
            self._cond.notify()
        return futures

    def close(self, timeout: float | None = None) -> None:
        """Stop the worker; rows still queued or running fail with BackendError."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def _matcher(self, constraint: Constraint | None) -> RowMatcher | None:
        if constraint is None:
            return None
        if self._constraints is None:
            vocab = getattr(self.model.config, "vocab_size", None)
            self._constraints = ConstraintEngine(self._tokenizer, int(vocab) if vocab else None)
        return self._constraints.matcher(constraint)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def active_rows(self) -> int:
        return sum(row is not None for row in self._rows)

    # ------------------------------------------------------------------ worker

    def _run(self) -> None:
        torch.set_num_threads(self.torch_threads)
        with torch.inference_mode():
            while True:
                with self._cond:
                    while not self._closed and not self._waiting and not self._rows:
                        self._cond.wait()
                    if self._closed:
                        break
                try:
                    self._admit()
                    if self._rows:
                        self._step()
                except Exception as exc:  # a broken step fails its rows, never the worker
                    log.exception("batcher step failed")
                    self._fail_active(BackendError(f"generation failed: {type(exc).__name__}: {exc}"))
        self._fail_active(BackendError("the batcher was closed before this sample finished"))
        with self._cond:
            groups = list(self._waiting)
            self._waiting.clear()
        for group in groups:
            _fail(list(group.pending), BackendError("the batcher was closed before this sample started"))

    def _fail_active(self, error: BackendError) -> None:
        _fail([row for row in self._rows if row is not None], error)
        self._rows = []
        self._keys, self._values = [], []
        self._mask = torch.zeros((0, 0), dtype=torch.bool, device=self.device)
        self._length = 0

    def _next_waiting(self) -> _Group | None:
        with self._cond:
            while self._waiting:
                group = self._waiting[0]
                while group.pending and group.pending[0].future.cancelled():
                    group.pending.popleft()
                if group.pending:
                    return group
                self._waiting.popleft()
            return None

    def _admit(self) -> None:
        """Fill free slots from the queue, then make the cache buffers fit the new batch."""
        joiners: list[tuple[_Row, _Group]] = []
        while self.active_rows + len(joiners) < self.max_batch_size:
            group = self._next_waiting()
            if group is None:
                break
            if group.prefix is None:
                try:
                    self._prefill(group)
                except Exception as exc:
                    with self._cond:
                        self._waiting.remove(group)
                    _fail(list(group.pending), BackendError(f"prefill failed: {type(exc).__name__}: {exc}"))
                    continue
            with self._cond:
                row = group.pending.popleft()
            assert group.first_logits is not None
            self._append(row, group.first_logits)
            if self._finish_if_done(row):
                continue
            joiners.append((row, group))
        self._place(joiners)

    def _prefill(self, group: _Group) -> None:
        """Run the prompt at batch 1; a prefix shared with a recent prompt is taken from the prefix cache."""
        prompt = group.prompt_ids
        spec = self.speculative
        if spec is not None and len(prompt) >= spec.min_tokens:
            self._speculative_prefill(group, spec)
            return
        reused, cached = self._longest_cached_prefix(prompt)
        if reused:
            cache = DynamicCache(ddp_cache_data=[(k[:, :, :reused], v[:, :, :reused]) for k, v in cached])
            self.prefix_hits += reused
        else:
            cache = DynamicCache(config=self.model.config)
        ids = torch.tensor([prompt[reused:]], dtype=torch.long, device=self.device)
        positions = torch.arange(reused, len(prompt), device=self.device).unsqueeze(0)
        out = self.model(
            input_ids=ids, position_ids=positions, use_cache=True, logits_to_keep=1, **{self._cache_kwarg: cache}
        )
        prefix = self._layers(cache)
        group.prefix = prefix
        group.first_logits = out.logits[0, -1].float()
        self._remember_prefix(tuple(prompt), prefix)

    def _speculative_prefill(self, group: _Group, spec: SpeculativePrefill) -> None:
        """Prefill only the prompt chunks the early-exit speculator ranks highest (see the module docstring)."""
        from veriloop.kernels.specprefill import prefill

        layers = int(getattr(self.model.config, "num_hidden_layers", spec.speculator_layers))
        state = prefill(
            self.model,
            torch.tensor(group.prompt_ids, dtype=torch.long),
            spec.keep_ratio,
            speculator_layers=max(1, min(spec.speculator_layers, layers)),
            look_ahead=spec.look_ahead,
            chunk_size=spec.chunk_size,
            eos_token_ids=sorted(self.eos_token_ids),
        )
        group.prefix = self._layers(state.cache)
        group.first_logits = state.logits[-1].float()
        self.speculative_prefills += 1

    def _layers(self, cache: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
        prefix = []
        for layer in cache.layers:
            if type(layer) is not DynamicLayer:
                kind = type(layer).__name__
                raise BackendError(
                    f"{type(self.model).__name__} uses a {kind} cache; the batcher supports DynamicLayer"
                )
            assert layer.keys is not None and layer.values is not None
            prefix.append((layer.keys, layer.values))
        return prefix

    def _remember_prefix(self, key: tuple[int, ...], prefix: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Keep a prompt's keys and values for later prompts that start the same way; oldest out first."""
        if key in self._prefixes:
            self._prefixes.move_to_end(key)
            return
        size = sum(keys.nbytes + values.nbytes for keys, values in prefix)
        if size > self.prefix_cache_bytes:
            return
        self._prefixes[key] = prefix
        self._prefix_bytes += size
        while self._prefix_bytes > self.prefix_cache_bytes:
            _, dropped = self._prefixes.popitem(last=False)
            self._prefix_bytes -= sum(keys.nbytes + values.nbytes for keys, values in dropped)

    def _longest_cached_prefix(self, prompt: list[int]) -> tuple[int, list[tuple[torch.Tensor, torch.Tensor]]]:
        """(tokens to reuse, their cached keys/values); at least one prompt token is always left to run."""
        best, best_key = 0, None
        for tokens in self._prefixes:
            limit = min(len(tokens), len(prompt) - 1)
            shared = 0
            while shared < limit and tokens[shared] == prompt[shared]:
                shared += 1
            if shared > best:
                best, best_key = shared, tokens
        if best_key is None or best < _MIN_PREFIX_REUSE:
            return 0, []
        self._prefixes.move_to_end(best_key)
        return best, self._prefixes[best_key]

    def _place(self, joiners: list[tuple[_Row, _Group]]) -> None:
        """Put joiners into free slots in place when they fit; otherwise rebuild the buffers."""
        free = [slot for slot, row in enumerate(self._rows) if row is None]
        fits = self._keys and len(joiners) == len(free) and all(group.width <= self._length for _, group in joiners)
        if fits:
            for slot, (row, group) in zip(free, joiners, strict=True):
                assert group.prefix is not None
                width = group.width
                row.start = self._length - width
                for layer, (keys, values) in enumerate(group.prefix):
                    self._keys[layer][slot, :, row.start : self._length] = keys[0]
                    self._values[layer][slot, :, row.start : self._length] = values[0]
                self._mask[slot].fill_(False)
                self._mask[slot, row.start : self._length] = True
                self._rows[slot] = row
        elif joiners or free:
            self._rebuild(joiners)

    def _rebuild(self, joiners: list[tuple[_Row, _Group]], extra: int = 0) -> None:
        """Copy the kept rows and the joiners into fresh, compact buffers with room to grow."""
        self.rebuilds += 1
        kept = [(slot, row) for slot, row in enumerate(self._rows) if row is not None]
        cut = min((row.start for _, row in kept), default=self._length)
        span = self._length - cut
        length = max([span] + [group.width for _, group in joiners])
        capacity = _round_up(length + max(extra, 1) + _CAPACITY_CHUNK // 2, _CAPACITY_CHUNK)
        rows = len(kept) + len(joiners)
        if rows == 0:
            self._rows, self._keys, self._values, self._length = [], [], [], 0
            self._mask = torch.zeros((0, 0), dtype=torch.bool, device=self.device)
            return
        template = self._keys[0] if self._keys else joiners[0][1].prefix[0][0]  # type: ignore[index]
        heads, head_dim = template.shape[1], template.shape[3]
        layers = len(self._keys) if self._keys else len(joiners[0][1].prefix or [])
        new_keys = [self._zeros(rows, heads, capacity, head_dim) for _ in range(layers)]
        new_values = [self._zeros(rows, heads, capacity, head_dim) for _ in range(layers)]
        if kept:
            src = torch.tensor([slot for slot, _ in kept], device=self.device)
            for layer in range(layers):
                new_keys[layer][: len(kept), :, length - span : length] = self._keys[layer][src, :, cut : self._length]
                new_values[layer][: len(kept), :, length - span : length] = self._values[layer][
                    src, :, cut : self._length
                ]
        for index, (_, group) in enumerate(joiners, start=len(kept)):
            assert group.prefix is not None
            width = group.width
            for layer, (keys, values) in enumerate(group.prefix):
                new_keys[layer][index, :, length - width : length] = keys[0]
                new_values[layer][index, :, length - width : length] = values[0]
        new_rows: list[_Row | None] = []
        mask = torch.zeros((rows, capacity), dtype=torch.bool, device=self.device)
        for index, (_, row) in enumerate(kept):
            row.start = row.start - cut + (length - span)
            mask[index, row.start : length] = True
            new_rows.append(row)
        for index, (row, group) in enumerate(joiners, start=len(kept)):
            row.start = length - group.width
            mask[index, row.start : length] = True
            new_rows.append(row)
        self._rows, self._keys, self._values, self._mask, self._length = new_rows, new_keys, new_values, mask, length

    def _zeros(self, *shape: int) -> torch.Tensor:
        # Zeros, not empty: masked columns get zero weight, and 0 * NaN garbage would still be NaN.
        return torch.zeros(shape, dtype=self.dtype, device=self.device)

    def _step(self) -> None:
        """One decode step for every active row; finished and cancelled rows leave their slot."""
        for slot, row in enumerate(self._rows):
            if row is not None and row.future.cancelled():
                self._rows[slot] = None
        live = [row for row in self._rows if row is not None]
        if not live:
            self._rebuild([])
            return
        if len(live) < len(self._rows):
            self._rebuild([])
        capacity = self._mask.shape[1]
        if self._length + 1 > capacity or min(row.start for row in live) >= _COMPACT_AT:
            self._rebuild([], extra=1)
        rows = [row for row in self._rows if row is not None]
        length = self._length
        self._mask[:, length] = True
        input_ids = torch.tensor([[row.tokens[-1]] for row in rows], dtype=torch.long, device=self.device)
        positions = torch.tensor([[row.position] for row in rows], dtype=torch.long, device=self.device)
        cache = Cache(layers=[_ColumnLayer(k, v, length) for k, v in zip(self._keys, self._values, strict=True)])
        out = self.model(
            input_ids=input_ids,
            attention_mask=self._mask[:, : length + 1],
            position_ids=positions,
            use_cache=True,
            **{self._cache_kwarg: cache},
        )
        self._length = length + 1
        self.steps += 1
        logits = out.logits[:, -1, :].float()
        mask_rows(logits, [row.matcher for row in rows])
        greedy = logits.argmax(dim=-1).tolist()
        log_probs = torch.log_softmax(logits, dim=-1) if any(row.spec.logprobs for row in rows) else None
        for slot, row in enumerate(rows):
            if row.generator is None:
                token = int(greedy[slot])
            else:
                token = _sample(logits[slot], row.spec.temperature, row.spec.top_p, row.generator)
            row.tokens.append(token)
            if row.matcher is not None:
                row.matcher.advance(token)
            if log_probs is not None and row.spec.logprobs:
                row.logprobs.append(float(log_probs[slot, token]))
            if self._finish_if_done(row):
                self._rows[slot] = None

    def _append(self, row: _Row, logits: torch.Tensor) -> None:
        """Take the first token of a row from its prompt's prefill logits."""
        logits = masked(logits, row.matcher)
        if row.generator is None:
            token = int(logits.argmax())
        else:
            token = _sample(logits, row.spec.temperature, row.spec.top_p, row.generator)
        row.tokens.append(token)
        if row.matcher is not None:
            row.matcher.advance(token)
        if row.spec.logprobs:
            row.logprobs.append(float(torch.log_softmax(logits, dim=-1)[token]))

    def _finish_if_done(self, row: _Row) -> bool:
        """Resolve the row's future if its last token ended it; True when it did."""
        token = row.tokens[-1]
        output: RowOutput | None = None
        if token in self.eos_token_ids:
            output = self._output(row, row.tokens[:-1], "stop")
        elif row.spec.stop and self._stop_in_tail(row):
            text = self._decode(row.tokens)
            cuts = [index for stop in row.spec.stop if stop and (index := text.find(stop)) >= 0]
            if cuts:
                output = self._output_cut(row, text, min(cuts))
        if output is None and row.matcher is not None and row.matcher.finished:
            output = self._output(row, row.tokens, "stop")  # the constraint is complete: nothing may follow
        if output is None and len(row.tokens) >= row.max_tokens:
            output = self._output(row, row.tokens, "length")
        if output is None:
            return False
        with contextlib.suppress(concurrent.futures.InvalidStateError):  # cancelled meanwhile: nobody waits
            row.future.set_result(output)
        return True

    def _stop_in_tail(self, row: _Row) -> bool:
        """Whether a stop string shows in the last few tokens' text (decoding the whole row each step is O(n²)).

        A stop that completes with the newest token spans at most 4 bytes per character, and every
        token adds at least one byte, so 4 tokens per character (plus slack for a split character at
        the window's start) always hold it. A hit is confirmed on the full text.
        """
        longest = max(len(stop) for stop in row.spec.stop)
        tail = self._decode(row.tokens[-(4 * longest + 4) :])
        return any(stop and stop in tail for stop in row.spec.stop)

    def _output(self, row: _Row, tokens: list[int], reason: FinishReason) -> RowOutput:
        return RowOutput(
            token_ids=list(tokens),
            logprobs=row.logprobs[: len(tokens)] if row.spec.logprobs else None,
            text=self._decode(tokens),
            finish_reason=reason,
            generated_tokens=len(row.tokens),
            prompt_tokens=row.prompt_len,
            latency_s=time.perf_counter() - row.submitted,
        )

    def _output_cut(self, row: _Row, text: str, cut: int) -> RowOutput:
        """The row ends where a stop string starts: keep the longest token prefix inside the kept text."""
        kept = text[:cut]
        count = len(row.tokens)
        while count > 0:
            decoded = self._decode(row.tokens[:count])
            if len(decoded) <= cut and kept.startswith(decoded):
                break
            count -= 1
        output = self._output(row, row.tokens[:count], "stop")
        return RowOutput(
            token_ids=output.token_ids,
            logprobs=output.logprobs,
            text=kept,
            finish_reason="stop",
            generated_tokens=output.generated_tokens,
            prompt_tokens=output.prompt_tokens,
            latency_s=output.latency_s,
        )

    def _decode(self, tokens: Sequence[int]) -> str:
        return str(self._tokenizer.decode(list(tokens), skip_special_tokens=True))


def column_major_linears(model: Any) -> int:
    """Store every Linear weight column-major (same values, same shapes); returns how many moved.

    `linear(x, W)` multiplies by W's transpose; with W column-major that transpose is a plain
    contiguous matrix, and MKL's small-batch sgemm is faster on it than on the transposed view:
    measured here, a decode step ran 9 % faster at batch 1 and 17 to 29 % faster at batch 8.
    Tied weights (lm_head and the embeddings) move once; `save_pretrained` still writes them.
    """
    moved = 0
    seen: set[int] = set()
    with torch.no_grad():
        for module in model.modules():
            weight = getattr(module, "weight", None)
            if not isinstance(module, torch.nn.Linear) or weight is None or id(weight) in seen:
                continue
            seen.add(id(weight))
            if weight.dim() == 2 and weight.stride(0) != 1:
                weight.data = weight.data.t().contiguous().t()
                moved += 1
    return moved


def default_eos_ids(model: Any, tokenizer: Any) -> set[int]:
    """Every token that ends a sample: the tokenizer's EOS plus the generation config's (may be a list)."""
    ids: set[int] = set()
    for value in (getattr(tokenizer, "eos_token_id", None), getattr(model.generation_config, "eos_token_id", None)):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, list | tuple):
            ids.update(int(item) for item in value)
    return ids


def _generator(seed: int | None) -> torch.Generator:
    generator = torch.Generator(device="cpu")
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(seed)
    return generator


def _sample(logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator) -> int:
    """Draw one token with temperature and nucleus (top-p) filtering from this row's own generator."""
    probs = torch.softmax(logits.float().cpu() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(descending=True)
        keep = sorted_probs.cumsum(0) - sorted_probs < top_p
        choice = torch.multinomial(sorted_probs * keep, 1, generator=generator)
        return int(order[choice])
    return int(torch.multinomial(probs, 1, generator=generator))


def _fail(rows: Sequence[_Row], error: BackendError | ConfigError) -> None:
    for row in rows:
        with contextlib.suppress(concurrent.futures.InvalidStateError):
            row.future.set_exception(error)


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple
