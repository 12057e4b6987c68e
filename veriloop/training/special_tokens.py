"""New special tokens for a causal LM: added to the tokenizer, embeddings resized, rows initialised from words.

ReVISE (Lee et al., ICML 2025) needs decision tokens the base vocabulary lacks. A freshly resized
embedding row is noise, so each new token starts as the mean embedding of a few tokens that say
what it means (`[eos]` from the end-of-turn token, `[refine]` from " wrong", " fix", ...): the
untrained model then already gives the new tokens sensible probabilities, and training moves
them from there. The result is saved as a model folder (and registered as `checkpoint:ID`), so
every backend and trainer loads it like any other model.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from veriloop.config import Settings
from veriloop.errors import ConfigError
from veriloop.records import RegisteredModel, new_id

EOS_SOURCE = "{eos_token}"
"""A source word standing for the tokenizer's own end-of-sequence token, whatever the model calls it."""

TOKENS_FILE = "veriloop-special-tokens.json"
"""Written last into a prepared folder: which tokens were added, from which base, initialised how."""


def _source_ids(tokenizer: Any, sources: Sequence[str]) -> list[int]:
    """Token ids of the source words (a special token by itself, or every token of a piece of text)."""
    ids: list[int] = []
    for source in sources:
        if source == EOS_SOURCE:
            if tokenizer.eos_token_id is None:
                raise ConfigError("the tokenizer has no end-of-sequence token to start a new token from")
            ids.append(int(tokenizer.eos_token_id))
        elif source in tokenizer.get_vocab():
            ids.append(int(tokenizer.convert_tokens_to_ids(source)))
        else:
            ids.extend(int(i) for i in tokenizer(source, add_special_tokens=False).input_ids)
    if not ids:
        raise ConfigError(f"the initialisation words {list(sources)!r} give no tokens")
    return ids


def add_special_tokens(model: Any, tokenizer: Any, tokens: Mapping[str, Sequence[str]]) -> dict[str, int]:
    """Add `tokens` (token -> words its embedding starts from) in place; returns every token's id.

    Tokens already in the vocabulary are left as they are, so preparing a prepared model is a no-op.
    Input and (untied) output embeddings both get the mean of the source tokens' rows.
    """
    vocab = tokenizer.get_vocab()
    new = [token for token in tokens if token not in vocab]
    if new:
        sources = {token: _source_ids(tokenizer, tokens[token]) for token in new}
        tokenizer.add_special_tokens({"additional_special_tokens": new}, replace_extra_special_tokens=False)
        old_rows = model.get_input_embeddings().weight.shape[0]
        if len(tokenizer) > old_rows:
            model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
        with torch.no_grad():
            embeddings = [model.get_input_embeddings().weight]
            output = model.get_output_embeddings()
            if output is not None and output.weight.data_ptr() != embeddings[0].data_ptr():
                embeddings.append(output.weight)
            for token, ids in sources.items():
                row = int(tokenizer.convert_tokens_to_ids(token))
                for weight in embeddings:
                    weight[row] = weight[ids].mean(dim=0)
    return {token: int(tokenizer.convert_tokens_to_ids(token)) for token in tokens}


def has_tokens(tokenizer: Any, tokens: Sequence[str]) -> bool:
    vocab = tokenizer.get_vocab()
    return all(token in vocab for token in tokens)


def prepared_dir(settings: Settings, base: str, tokens: Mapping[str, Sequence[str]]) -> Path:
    """Deterministic folder for `base` with `tokens` added: the same request reuses the same folder."""
    key = json.dumps([base, {token: list(words) for token, words in tokens.items()}], sort_keys=True)
    return settings.paths.home / "checkpoints" / f"tokens-{hashlib.sha256(key.encode()).hexdigest()[:12]}"


def prepare_model(
    settings: Settings, tokens: Mapping[str, Sequence[str]], *, base: str | None = None, register: bool = True
) -> tuple[Path, str | None]:
    """A model folder of `base` (default `settings.llm.model`) with `tokens` added; (folder, checkpoint id).

    Built once per (base, tokens) and written atomically; later calls return the folder (and register
    it again only if this store does not know it yet).
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from veriloop.llm.embedded import resolve_model

    base = base or settings.llm.model
    dest = prepared_dir(settings, base, tokens)
    marker = dest / TOKENS_FILE
    if not marker.is_file():
        folder = resolve_model(base, settings)
        tokenizer: Any = AutoTokenizer.from_pretrained(folder)
        model: Any = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
        ids = add_special_tokens(model, tokenizer, tokens)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", suffix=".partial", dir=dest.parent))
        try:
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            info = {
                "base": base,
                "tokens": {t: list(w) for t, w in tokens.items()},
                "ids": ids,
                "vocab": len(tokenizer),
            }
            (tmp / TOKENS_FILE).write_text(json.dumps(info, indent=2) + "\n")
            if not marker.is_file():  # else a concurrent preparation finished first
                if dest.exists():
                    shutil.rmtree(dest)  # an unfinished earlier attempt (no marker)
                tmp.rename(dest)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    model_id: str | None = None
    if register:
        model_id = _register(settings, base, dest)
    return dest, model_id


def _register(settings: Settings, base: str, folder: Path) -> str:
    from veriloop.store import TrajectoryStore

    info = json.loads((folder / TOKENS_FILE).read_text())
    with TrajectoryStore.from_settings(settings) as store:
        for known in store.list_models(method="special_tokens"):
            if known.path == str(folder):
                return known.id
        record = store.register_model(
            RegisteredModel(id=new_id(), base=base, method="special_tokens", path=str(folder), metrics=info)
        )
    return record.id
