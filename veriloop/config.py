"""Settings: defaults, then `veriloop.toml`, then `VERILOOP_*` environment variables, then CLI flags.

Each section is a model whose fields carry a description, so `veriloop config show` and the
docs explain themselves. Nested fields are set from the environment with a double underscore:
`VERILOOP_LLM__BACKEND=openai`, `VERILOOP_STORE__URL=postgresql+psycopg://...`.
"""

from __future__ import annotations

import os
import tomllib
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from veriloop.errors import ConfigError

CONFIG_ENV = "VERILOOP_CONFIG"
DEFAULT_CONFIG_FILE = "veriloop.toml"


def _default_home() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "veriloop"


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


class PathSettings(Section):
    """Where veriloop keeps its files."""

    home: Path = Field(default_factory=_default_home, description="Root for the database, caches and exports.")
    data_dir: Path | None = Field(
        None, description="Benchmark data folder (the layout of shared/data); None uses bundled data only."
    )

    @property
    def cache_dir(self) -> Path:
        return self.home / "cache"


class LLMSettings(Section):
    """The shared inference backend."""

    backend: str = Field(
        "embedded",
        description="Backend name: embedded, openai, vllm, or llama_cpp (llama.cpp's llama-server on the model's GGUF,"
        " started by veriloop; docs/backend.md).",
    )
    model: str = Field(
        "qwen2.5-coder-1.5b-instruct",
        description="Model: a bundled name (`veriloop models`: qwen2.5-coder-1.5b-instruct,"
        " qwen2.5-coder-0.5b-instruct, smollm2-135m-instruct), a Hugging Face model folder, checkpoint:ID,"
        " or a server model name.",
    )
    torch_threads: int = Field(1, ge=1, le=256, description="Torch intra-op threads; 1 is fastest on shared cores.")
    max_batch_size: int = Field(8, ge=1, le=256, description="Rows decoded together by the continuous batcher.")
    replicas: int = Field(
        0,
        ge=0,
        le=256,
        description="Embedded batchers sharing the model, each decoding its share of max_batch_size's rows on its"
        " own core; 0: one per usable core, keeping at least 4 slots each.",
    )
    device: str = Field("cpu", description="Torch device for the embedded backend (cpu, cuda).")
    dtype: str = Field("float32", description="Weights dtype for the embedded backend (float32, bfloat16).")
    base_url: str = Field("http://127.0.0.1:8000/v1", description="OpenAI-compatible server for the openai backend.")
    api_key: str = Field("EMPTY", description="API key sent to the OpenAI-compatible server.")
    max_concurrency: int = Field(
        8,
        ge=1,
        le=1024,
        description="Concurrent HTTP requests of the openai backend; the llama_cpp backend's server slots (-np).",
    )
    max_retries: int = Field(3, ge=0, le=20, description="Retries with exponential back-off on HTTP failures.")
    timeout_s: float = Field(120.0, gt=0, description="Per-request timeout of the openai and llama_cpp backends.")
    llama_server: str | None = Field(
        None,
        description="The llama-server binary of the llama_cpp backend; None: $VERILOOP_LLAMA_SERVER, a llama-server"
        " on PATH, or the one `python -m veriloop.llm.llama_server build` caches.",
    )
    llama_threads: int = Field(
        0, ge=0, le=256, description="Threads of the llama_cpp backend's server; 0: one per usable core."
    )
    llama_context: int = Field(
        4096, ge=256, le=131072, description="Tokens (prompt plus answer) each llama_cpp server slot holds."
    )
    quantization: Literal["none", "int4", "nf4", "fp4", "any4", "any3", "any2"] = Field(
        "none",
        description="Weight quantization of the embedded model's linear layers (any4 learns per-row tables).",
    )
    quantization_group_size: int = Field(128, ge=8, description="Input columns sharing one scale when quantizing.")
    kv_cache: Literal["full", "commvq"] = Field(
        "full", description="KV cache of the embedded model: full precision, or CommVQ (fitted once, cached)."
    )
    prefill: Literal["full", "specprefill"] = Field(
        "full", description="Prompt prefill of the embedded model: full, or SpecPrefill (keeps the important chunks)."
    )
    specprefill_keep: float = Field(0.3, gt=0, le=1, description="Fraction of prompt tokens SpecPrefill keeps.")
    linear_weights: Literal["auto", "float32", "float16", "bfloat16"] = Field(
        "auto",
        description="Weights the embedded batcher's CPU linear layers multiply by for decoding rows: float32, an fp16 "
        "copy run by FBGEMM (activations stay float32), or a bf16 copy (activations rounded to bf16, sums in float32) "
        "run by veriloop's AVX512-BF16 kernel where it builds, else by oneDNN. auto: bfloat16 where that kernel "
        "builds (a few rows cost what one does), else float16. Quality against float32 in `veriloop bench llm` under "
        "numerics.",
    )
    prefill_weights: Literal["auto", "float32", "float16", "bfloat16"] = Field(
        "auto",
        description="What the prompt rows' linear products multiply by (decoding rows: linear_weights). auto: bfloat16 "
        "(weights and inputs rounded to bf16, sums in float32; twice FBGEMM's fp16 speed on a 100-token chunk) where "
        "linear_weights is low-precision and the CPU has bf16 dot products, else linear_weights; float32 goes with "
        "float32 linear_weights only.",
    )
    kv_dtype: Literal["auto", "float32", "float16"] = Field(
        "auto",
        description="What the embedded batcher's full KV cache stores keys and values as (attention sums in float32 "
        "either way). auto: float16 where decoding rows multiply by low-precision weights and attend through the C++ "
        "kernel (it reads half the bytes per cached token, the decode step's one cost that grows with each row's "
        "length), else the model's dtype. Quality against float32 in `veriloop bench llm` under numerics.",
    )
    cpu_attention_kernel: bool = Field(
        True,
        description="Decoding rows attend through a C++ loop compiled once per machine (about 40 s; twice as fast as "
        "PyTorch's CPU kernel at a few rows); false, or where no C++ compiler works: PyTorch's kernel.",
    )
    script_decode: bool = Field(
        True,
        description="Run the decoder layers of each batcher step as one TorchScript call (same results, no GIL, so "
        "replicas step in parallel); false: the Python loop. Applies with float16 or bfloat16 linear weights.",
    )


class StoreSettings(Section):
    """The trajectory store."""

    url: str | None = Field(
        None,
        description="SQLAlchemy URL; None means SQLite at <home>/veriloop.db. PostgreSQL: postgresql+psycopg://...",
    )
    busy_timeout_ms: int = Field(30000, ge=0, description="SQLite busy timeout for concurrent writers.")
    create_new_sqlite: bool = Field(
        True,
        description="Create and migrate a brand-new empty SQLite database on first use; existing databases at an "
        "older revision, and every PostgreSQL database, need `veriloop db upgrade`.",
    )


class SandboxSettings(Section):
    """Where generated code runs."""

    backend: str = Field("bwrap", description="Sandbox backend: bwrap (default), docker, or process (unsafe).")
    timeout_s: float = Field(10.0, gt=0, description="Default wall-clock limit per job.")
    allow_unsafe: bool = Field(False, description="Let the process backend run code with no isolation at all.")
    memory_mb: int = Field(512, ge=16, description="Default memory limit per job (cgroup), in MiB.")
    pids: int = Field(64, ge=4, description="Default limit on processes plus threads per job.")
    output_bytes: int = Field(1 << 20, ge=1024, description="Default stdout + stderr bytes kept per step.")
    file_size_mb: int = Field(16, ge=0, description="Default largest file a job may write, in MiB.")
    open_files: int = Field(256, ge=16, description="Default open file descriptors per job process.")
    disk_mb: int = Field(64, ge=1, description="Default size of a job's private /work and /tmp, in MiB.")
    warm_workers: int = Field(2, ge=0, le=64, description="Pre-started sandboxes kept for reuse; 0 = cold only.")
    cgroups: Literal["required", "auto", "off"] = Field(
        "required",
        description="Per-job cgroups of the bwrap backend: required (a job fails when they cannot be made), auto (fall "
        "back to per-job rlimits, RLIMIT_AS and RLIMIT_NPROC, where they cannot; the worker container), off (rlimits).",
    )
    work_root: Path | None = Field(None, description="Host folder for job inputs; None = the system temp folder.")
    docker_image: str = Field("veriloop-sandbox:local", description="Image of the docker backend.")
    docker_url: str | None = Field(None, description="Docker engine URL; None = DOCKER_HOST or the local socket.")


class ServiceSettings(Section):
    """The API server."""

    host: str = Field("127.0.0.1", description="Interface `veriloop serve` binds.")
    port: int = Field(8000, ge=1, le=65535, description="Port `veriloop serve` binds.")
    api_token: str | None = Field(
        None, description="When set, every endpoint but /health requires it (also read from VERILOOP_API_TOKEN)."
    )
    workers: int = Field(
        1,
        ge=0,
        le=64,
        description="Job loops inside `veriloop serve`; 0 = the API only queues runs for `veriloop worker`.",
    )
    executor: str = Field("local", description="How a claimed run executes: local (this process) or ray.")
    ray_address: str | None = Field(None, description="Ray cluster for the ray executor; None starts a local one.")
    lease_s: float = Field(60.0, gt=0, description="A worker's claim on a run lasts this long unless renewed.")
    heartbeat_s: float = Field(10.0, gt=0, description="How often a worker renews its lease (well under lease_s).")
    poll_s: float = Field(1.0, gt=0, description="How often an idle worker looks for queued runs.")


class JudgeSettings(Section):
    """`POST /api/judge`: how much work one client and all clients may queue, and when a batch becomes a job."""

    concurrency: int = Field(0, ge=0, le=1024, description="Candidates judged at once; 0 = sandbox.warm_workers.")
    sync_max: int = Field(64, ge=1, description="Batches up to this size are answered in the response; larger: a job.")
    max_candidates: int = Field(4096, ge=1, description="Candidates per request at most (413 above).")
    max_body_mb: float = Field(32.0, gt=0, description="Request body size at most, in MiB (413 above).")
    token_requests: int = Field(16, ge=1, description="Requests (and jobs) in progress per token at most (429).")
    token_queue: int = Field(8192, ge=1, description="Candidates accepted but not yet judged per token (429).")
    queue_max: int = Field(32768, ge=1, description="Candidates accepted but not yet judged in all (429).")
    queue_timeout_s: float = Field(300.0, gt=0, description="A candidate waiting longer for a slot: infra_error.")
    job_ttl_s: float = Field(3600.0, gt=0, description="Finished jobs (and their results) are kept this long.")
    security: bool = Field(True, description="Report bandit's findings for Python candidates.")


class VerifierSettings(Section):
    """Formal verifiers, the spec guard and the verification cache."""

    timeout_s: float = Field(60.0, gt=0, description="Wall-clock limit of one verifier run.")
    dafny: str = Field("dafny", description="Dafny command (a name on PATH or a path).")
    dafny_time_limit_s: int = Field(20, ge=0, description="Dafny's per-VC solver limit (/timeLimit); 0 = none.")
    nagini_python: Path | None = Field(
        None,
        description="Python of the Nagini virtualenv; None = .venv-nagini beside the checkout, then "
        "<home>/nagini-venv.",
    )
    nagini_memory_mb: int = Field(3072, ge=256, description="Recycle a warm Nagini worker above this RSS.")
    verus: str = Field("verus", description="Verus command (a name on PATH or a path).")
    verus_multiple_errors: int = Field(100, ge=1, description="Verus --multiple-errors N.")
    commands: dict[str, str] = Field(
        default_factory=dict,
        description="Commands of the other verifiers, by name (a name on PATH or a path), so a new verifier needs no "
        'field here: [verifiers.commands] toy = "/opt/toy/bin/toy", or VERILOOP_VERIFIERS__COMMANDS__TOY.',
    )
    guard: bool = Field(True, description="Run the spec guard (reject spec weakening and escapes).")
    isolation: str = Field("bwrap", description="Where verifier processes run: bwrap (default) or none (the host).")
    memory_mb: int = Field(4096, ge=256, description="Memory limit of one sandboxed verifier process (cgroup), MiB.")
    cache: bool = Field(True, description="Reuse stored results for identical verifications.")

    @model_validator(mode="after")
    def _one_place_per_command(self) -> VerifierSettings:
        for name in self.commands:
            if name in self._own_commands():
                raise ValueError(f"set verifiers.{name}, not verifiers.commands.{name}")
        return self

    def _own_commands(self) -> dict[str, str]:
        return {"dafny": self.dafny, "verus": self.verus}

    def command(self, name: str) -> str:
        """The command of the verifier `name`: its own field (dafny, verus), else `commands`, else the name itself."""
        return self._own_commands().get(name) or self.commands.get(name, name)


class Settings(BaseSettings):
    """Effective settings of one veriloop process."""

    model_config = SettingsConfigDict(
        env_prefix="VERILOOP_", env_nested_delimiter="__", extra="forbid", validate_default=True
    )

    paths: PathSettings = Field(default_factory=PathSettings)
    llm: LLMSettings = Field(default_factory=LLMSettings)
    store: StoreSettings = Field(default_factory=StoreSettings)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    service: ServiceSettings = Field(default_factory=ServiceSettings)
    verifiers: VerifierSettings = Field(default_factory=VerifierSettings)
    judge: JudgeSettings = Field(default_factory=JudgeSettings)

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # First wins, field by field: CLI flags (init kwargs), environment, the TOML file.
        return (init_settings, env_settings, _TomlFileSource(settings_cls, _FILE_VALUES.get() or {}))

    @property
    def database_url(self) -> str:
        if self.store.url:
            return self.store.url
        return f"sqlite:///{self.paths.home / 'veriloop.db'}"


_FILE_VALUES: ContextVar[dict[str, Any] | None] = ContextVar("veriloop_file_values", default=None)


class _TomlFileSource(PydanticBaseSettingsSource):
    """The parsed settings file, lowest-priority source after the defaults."""

    def __init__(self, settings_cls: type[BaseSettings], values: dict[str, Any]) -> None:
        super().__init__(settings_cls)
        self._values = values

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._values.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._values)


def read_config_file(path: Path | None) -> dict[str, Any]:
    """The TOML settings file as a dict; an explicit path that is missing or malformed is an error."""
    explicit = path is not None or CONFIG_ENV in os.environ
    candidate = path or Path(os.environ.get(CONFIG_ENV, DEFAULT_CONFIG_FILE))
    if not candidate.exists():
        if explicit:
            raise ConfigError(f"settings file {candidate} does not exist")
        return {}
    try:
        with candidate.open("rb") as handle:
            return tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"settings file {candidate} is not valid TOML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read settings file {candidate}: {exc.strerror}") from None


def load_settings(config_file: Path | None = None, **flags: Any) -> Settings:
    """Build the effective settings; `flags` are CLI overrides as nested dicts ({"llm": {"model": ...}})."""
    token = _FILE_VALUES.set(read_config_file(config_file))
    try:
        return Settings(**{key: value for key, value in flags.items() if value})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ConfigError(f"invalid setting {where}: {first['msg']}") from None
    finally:
        _FILE_VALUES.reset(token)
