"""`checkpoint:ID` model specs: the store's registered checkpoints, served by the embedded backend.

`veriloop.llm.embedded` names `resolve_checkpoint` by its module path and imports it on the first
`checkpoint:` spec, so any process that can reach the store can serve a trained model.
"""

from __future__ import annotations

from pathlib import Path

from veriloop.config import Settings
from veriloop.errors import BackendError


def resolve_checkpoint(ident: str, settings: Settings) -> Path:
    """The folder of registered checkpoint `ident` (an id or unique prefix) in the configured store."""
    from veriloop.store import TrajectoryStore

    if not ident:
        raise BackendError("checkpoint: needs an id, e.g. checkpoint:3f2a9c1d (see `veriloop train` output)")
    with TrajectoryStore.from_settings(settings) as store:
        record = store.get_model(ident)
    folder = Path(record.path)
    if not (folder / "config.json").is_file():
        raise BackendError(f"checkpoint {record.id} points at {folder}, which holds no model (config.json missing)")
    return folder
