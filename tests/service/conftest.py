"""Service fixtures: the store tests' PostgreSQL fixtures (shared, not copied), and a scripted-model settings maker."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "veriloop_store_fixtures", Path(__file__).parents[1] / "store" / "conftest.py"
)
assert _spec is not None and _spec.loader is not None
_store_fixtures = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_store_fixtures)

postgres_base_url = _store_fixtures.postgres_base_url
postgres_url = _store_fixtures.postgres_url
