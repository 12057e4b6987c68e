"""Benchmark folders unpacked from a pinned repository archive into the cache.

Why: the registered suites must load for a user who has only the package and a network, not this
repository's data folder. A GitHub `archive/<commit>.tar.gz` is one request, pinned to a commit (so
the suite's version means what it says), and holds the files byte for byte.
"""

from __future__ import annotations

import shutil
import tarfile
import tempfile
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

import httpx

from veriloop.errors import ConfigError, UnavailableError

COMPLETE = ".complete"
"""Marker written last: a folder without it is a broken earlier attempt and is fetched again."""


def _members(archive: tarfile.TarFile, base: str, keep: Sequence[str]) -> list[tuple[tarfile.TarInfo, str]]:
    """(member, path below `base`) for the regular files under `base` whose path starts with one of `keep`."""
    chosen = []
    for member in archive.getmembers():
        parts = PurePosixPath(member.name).parts[1:]  # the archive's own top folder (`Repo-<commit>/`)
        if not member.isfile() or ".." in parts or not parts:
            continue
        path = "/".join(parts)
        if not path.startswith(base):
            continue
        relative = path[len(base) :]
        if relative and any(relative.startswith(prefix) for prefix in keep):
            chosen.append((member, relative))
    return chosen


def fetch_folder(
    url: str,
    base: str,
    keep: Sequence[str],
    target: Path,
    *,
    what: str,
    instead: str,
    transport: httpx.BaseTransport | None = None,
) -> Path:
    """`target` holding the files of the tar.gz at `url` under `base` (only paths starting with `keep`).

    Fetched once: a complete `target` is returned as is. Offline, an UnavailableError (when the archive lacks
    `base`, a ConfigError) names `what` is missing and says what to do `instead`.
    """
    if (target / COMPLETE).is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}-") as scratch:
        download = Path(scratch) / "archive.tar.gz"
        try:
            with (
                httpx.Client(transport=transport, follow_redirects=True, timeout=120.0) as client,
                client.stream("GET", url) as response,
            ):
                response.raise_for_status()
                with download.open("wb") as sink:
                    for chunk in response.iter_bytes():
                        sink.write(chunk)
        except httpx.HTTPError as exc:
            raise UnavailableError(
                f"{what} is not in the cache and {url} could not be fetched ({exc}); {instead}"
            ) from None
        unpacked = Path(scratch) / "unpacked"
        try:
            with tarfile.open(download, "r:gz") as archive:
                members = _members(archive, base, keep)
                for member, relative in members:
                    source = archive.extractfile(member)
                    if source is None:
                        continue
                    path = unpacked / relative
                    path.parent.mkdir(parents=True, exist_ok=True)
                    with source, path.open("wb") as sink:
                        shutil.copyfileobj(source, sink)
        except (tarfile.TarError, OSError, EOFError) as exc:
            raise ConfigError(f"{url} is not a readable tar.gz archive ({exc}); {instead}") from None
        if not members:
            raise ConfigError(f"{url} holds no files under {base}; {instead}")
        (unpacked / COMPLETE).write_text(url + "\n", encoding="utf-8")
        if (target / COMPLETE).is_file():  # another process finished first
            return target
        if target.exists():  # an incomplete earlier attempt
            shutil.rmtree(target)
        unpacked.replace(target)
    return target
