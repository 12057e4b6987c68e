"""Bad input gives one line on stderr and a non-zero exit code, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from veriloop.cli import main


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_line_error(code: int, err: str, expected: str) -> None:
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    assert expected in lines[0]
    assert "Traceback" not in err


def test_malformed_settings_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "veriloop.toml"
    bad.write_text("[llm\nmodel = ")
    code, _, err = run_cli(capsys, "--config", str(bad), "config", "show")
    assert_one_line_error(code, err, "is not valid TOML")
    assert code == 2


def test_setting_of_the_wrong_type(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "veriloop.toml"
    bad.write_text('[llm]\nmax_batch_size = "many"\n')
    code, _, err = run_cli(capsys, "--config", str(bad), "config", "show")
    assert_one_line_error(code, err, "llm.max_batch_size")


def test_unknown_setting_section(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "veriloop.toml"
    bad.write_text("[nonsense]\nx = 1\n")
    code, _, err = run_cli(capsys, "--config", str(bad), "config", "show")
    assert_one_line_error(code, err, "nonsense")


def test_missing_settings_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "--config", str(tmp_path / "absent.toml"), "config", "show")
    assert_one_line_error(code, err, "does not exist")


def test_unknown_backend(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "--home", str(tmp_path), "--backend", "nosuch", "generate", "hi")
    assert_one_line_error(code, err, "unknown backend 'nosuch'")
    assert "embedded" in err and code == 2


def test_unknown_run_id(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "--home", str(tmp_path), "runs", "show", "no-such-run")
    assert_one_line_error(code, err, "no-such-run")


def test_unknown_benchmark(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "bench", "nosuch")
    assert_one_line_error(code, err, "unknown benchmark")


def test_bench_help_lists_benchmarks_and_a_benchmark_shows_its_own_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run_cli(capsys, "bench", "--help")
    listed = out.split("Benchmarks: ", 1)[1].split("\n", 1)[0].split(", ")
    assert code == 0 and listed == sorted(listed)
    assert {"alphaverus", "alphaverus_pools", "bf16_linear", "f2strans", "gpu_llm", "grpo", "llm_step", "rft"} <= set(
        listed
    )
    assert not any(name.startswith("_") for name in listed)  # the shared harness (_held_out) is no bench
    code, out, _ = run_cli(capsys, "bench", "train", "--help")
    assert code == 0 and "usage: veriloop bench train" in out and "--configs" in out


def test_flags_override_environment_which_overrides_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "veriloop.toml"
    config.write_text('[llm]\nmodel = "from-file"\nbackend = "from-file"\nmax_batch_size = 3\n')
    monkeypatch.setenv("VERILOOP_LLM__BACKEND", "from-env")
    monkeypatch.setenv("VERILOOP_LLM__MODEL", "from-env")
    code, out, _ = run_cli(capsys, "--config", str(config), "--model", "from-flag", "config", "show", "--json")
    assert code == 0

    llm = json.loads(out)["llm"]
    assert (llm["model"], llm["backend"], llm["max_batch_size"]) == ("from-flag", "from-env", 3)
