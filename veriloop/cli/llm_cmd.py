"""`veriloop generate` (completions from the configured backend) and `veriloop models` (what is available)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from veriloop.cli.app import JsonFlag, app, emit, state
from veriloop.config import Settings
from veriloop.errors import ConfigError
from veriloop.llm.base import BACKENDS, TEST_DOUBLES, get_backend
from veriloop.records import Completion, Constraint, Message, Prompt, SamplingParams


def _params(**values: Any) -> SamplingParams:
    try:
        return SamplingParams(**values)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise ConfigError(f"invalid --{where.replace('_', '-')}: {first['msg']}") from None


def _constraint(regex: str | None, json_schema: Path | None, grammar: Path | None) -> Constraint | None:
    """The one structure constraint the flags name (a grammar file is GBNF when it ends in .gbnf, else Lark)."""
    given = [
        flag for flag, value in (("--regex", regex), ("--json-schema", json_schema), ("--grammar", grammar)) if value
    ]
    if len(given) > 1:
        raise ConfigError(f"give one constraint, not {' and '.join(given)}")
    if regex is not None:
        constraint = Constraint(kind="regex", value=regex)
    elif json_schema is not None or grammar is not None:
        path = json_schema if json_schema is not None else grammar
        assert path is not None
        try:
            text = path.read_text()
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc.strerror or exc}") from None
        kind = "json_schema" if json_schema is not None else "gbnf" if path.suffix == ".gbnf" else "lark"
        try:
            constraint = Constraint(kind=kind, value=text)
        except ValidationError:
            raise ConfigError(f"{path} is empty") from None
    else:
        return None
    from veriloop.llm.constraints import validate

    validate(constraint)
    return constraint


async def _generate(settings: Settings, prompt: Prompt, params: SamplingParams) -> tuple[str, list[Completion]]:
    backend = get_backend(settings)
    try:
        [completions] = await backend.generate([prompt], params)
        return backend.model_id, completions
    finally:
        await backend.aclose()


@app.command("generate")
def generate(
    ctx: typer.Context,
    prompt: Annotated[str, typer.Argument(help="The user message (or, with --raw, the whole prompt text).")],
    n: Annotated[int, typer.Option("--n", help="Samples to draw.")] = 1,
    temperature: Annotated[float, typer.Option("--temperature", help="0 is greedy decoding.")] = 0.0,
    top_p: Annotated[float, typer.Option("--top-p", help="Nucleus sampling mass.")] = 1.0,
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="New tokens per sample at most.")] = 256,
    stop: Annotated[list[str] | None, typer.Option("--stop", help="String that ends a sample (repeatable).")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Seed for reproducible sampling.")] = None,
    logprobs: Annotated[bool, typer.Option("--logprobs", help="Return each token's log-probability.")] = False,
    system: Annotated[str | None, typer.Option("--system", help="System message before the prompt.")] = None,
    raw: Annotated[bool, typer.Option("--raw", help="Send PROMPT as plain text, without the chat template.")] = False,
    regex: Annotated[
        str | None, typer.Option("--regex", help="Every sample must match this regular expression.")
    ] = None,
    json_schema: Annotated[
        Path | None, typer.Option("--json-schema", help="Every sample must be JSON valid under this schema file.")
    ] = None,
    grammar: Annotated[
        Path | None,
        typer.Option("--grammar", help="Every sample must parse under this grammar (Lark, or GBNF *.gbnf)."),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Generate completions with the configured backend (chat template unless --raw), optionally constrained."""
    params = _params(
        n=n,
        temperature=temperature,
        top_p=top_p,
        max_tokens=max_tokens,
        stop=stop or [],
        seed=seed,
        logprobs=logprobs,
        constraint=_constraint(regex, json_schema, grammar),
    )
    if raw and system is not None:
        raise ConfigError("--system needs the chat template; drop --raw or put the system text into PROMPT")
    request: Prompt
    if raw:
        request = prompt
    else:
        request = ([Message(role="system", content=system)] if system is not None else []) + [
            Message(role="user", content=prompt)
        ]
    settings = state(ctx).settings()
    model_id, completions = asyncio.run(_generate(settings, request, params))
    result = {"backend": settings.llm.backend, "model": model_id, "prompt": request, "completions": completions}

    def render(_: object) -> None:
        for index, completion in enumerate(completions):
            if len(completions) > 1:
                typer.echo(f"--- sample {index + 1}/{len(completions)} ---")
            typer.echo(completion.text)
            tail = f"[{completion.finish_reason}, {completion.usage.completion_tokens} tokens"
            if completion.logprobs:
                tail += f", mean logprob {sum(completion.logprobs) / len(completion.logprobs):.3f}"
            typer.echo(tail + f", {completion.latency_s:.1f} s]", err=True)

    emit(result, as_json, render)


@app.command("models")
def models(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """List inference backends and the bundled models (size, licence, source package, converted or not)."""
    from veriloop.llm.embedded import describe_bundled

    settings = state(ctx).settings()
    known: list[dict[str, Any]] = describe_bundled(settings)
    spec = settings.llm.model
    if not any(model["default"] for model in known):
        entry: dict[str, Any] = {"name": spec, "backend": settings.llm.backend, "default": True}
        if settings.llm.backend == "embedded" and ":" not in spec:
            folder = Path(spec).expanduser()
            entry.update(path=str(folder), exists=(folder / "config.json").is_file())
        known.append(entry)
    result: dict[str, Any] = {
        "backend": settings.llm.backend,
        "model": spec,
        "backends": [
            {"name": name, "target": BACKENDS[name], "default": name == settings.llm.backend}
            for name in BACKENDS
            if name not in TEST_DOUBLES or name == settings.llm.backend
        ],
        "models": known,
    }

    def render(_: object) -> None:
        typer.echo("backends:")
        for backend in result["backends"]:
            typer.echo(f"  {'*' if backend['default'] else ' '} {backend['name']:<10} {backend['target']}")
        typer.echo("models:")
        for model in known:
            mark = "*" if model["default"] else " "
            if "cached" in model:
                size = f"{model['gguf_bytes'] / 1e6:,.0f} MB GGUF" if model["gguf_bytes"] else "GGUF in one wheel"
                typer.echo(f"  {mark} {model['name']:<28} {model['parameters']:>5} params, {size}, {model['licence']}")
                if not model["installed"]:
                    status = f"not installed: {model['install']}"
                elif model["cached"]:
                    status = f"converted: {model['cache']}"
                else:
                    status = "installed, not converted yet (first use joins, checks and converts it, 1-2 min)"
                typer.echo(f"      from {model['source']}; {status}")
            else:
                where = model.get("path", "")
                missing = "" if model.get("exists", True) else " (missing)"
                typer.echo(f"  {mark} {model['name']:<24} {model['backend']:<9} {where}{missing}")

    emit(result, as_json, render)
