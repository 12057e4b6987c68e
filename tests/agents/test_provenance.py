"""What a run records about where its numbers come from: hashes, versions, redacted settings."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from veriloop.agents import provenance
from veriloop.config import load_settings
from veriloop.records import Task


def test_the_bundled_model_is_found_as_the_backend_finds_it(tmp_path: Path) -> None:
    from veriloop.llm import embedded

    settings = load_settings(paths={"home": tmp_path}, llm={"model": "smollm2-135m-instruct"})
    assert provenance.model_files(settings) == [embedded.gguf_path()]


def test_secrets_are_removed_at_every_depth() -> None:
    settings = {"llm": {"api_key": "sk-1", "model": "m"}, "service": [{"api_token": "t", "port": 1}], "password": "x"}
    assert provenance.redact(settings) == {"llm": {"model": "m"}, "service": [{"port": 1}]}


def test_weights_hash_follows_the_bytes_and_a_served_model_has_none(tmp_path: Path) -> None:
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    weights = folder / "model.safetensors"
    weights.write_bytes(b"first weights")
    settings = load_settings(paths={"home": tmp_path / "home"}, llm={"model": str(folder)})
    first = provenance.checkpoint_hash(settings)
    assert first is not None and first.startswith("sha256:") and provenance.checkpoint_hash(settings) == first
    weights.write_bytes(b"other weights!")  # a different size, so the cached hash is not reused
    assert provenance.checkpoint_hash(settings) not in (None, first)
    served = load_settings(paths={"home": tmp_path / "home"}, llm={"backend": "openai", "model": "gpt-x"})
    assert provenance.checkpoint_hash(served) is None
    missing = load_settings(paths={"home": tmp_path / "home"}, llm={"model": str(tmp_path / "absent")})
    assert provenance.checkpoint_hash(missing) is None


def test_suite_hash_changes_with_any_task_content() -> None:
    task = Task(id="t/1", suite="s", language="python", prompt="p", tests="assert True")
    changed = task.model_copy(update={"tests": "assert 1"})
    assert provenance.suite_hash([task]) == provenance.suite_hash([task])
    assert provenance.suite_hash([task]) != provenance.suite_hash([changed])
    assert provenance.suite_hash([task]) != provenance.suite_hash([])


def test_git_commit_is_the_checkout_veriloop_runs_from() -> None:
    commit, dirty = provenance.git_state()
    root = Path(provenance.__file__).resolve().parents[2]
    expected = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True)
    assert commit == expected.stdout.strip() and isinstance(dirty, bool)


def test_prompt_hashes_name_the_template_module() -> None:
    hashes = provenance.prompt_hashes("veriloop.agents.mucode")
    assert list(hashes) == ["veriloop.agents.mucode.prompts"] and len(hashes["veriloop.agents.mucode.prompts"]) == 64
    assert list(provenance.prompt_hashes("veriloop.agents.direct")) == ["veriloop.agents.direct"]


@pytest.mark.dafny
def test_verifier_versions_follow_the_task_languages(tmp_path: Path) -> None:
    settings = load_settings(paths={"home": tmp_path})
    dafny = Task(id="d/1", suite="s", language="dafny", prompt="p", tests="")
    python = Task(id="p/1", suite="s", language="python", prompt="p", tests="assert True")
    assert provenance.verifier_versions(settings, [python]) == {}
    found = provenance.verifier_versions(settings, [dafny, python])
    assert list(found) == ["dafny"] and found["dafny"][:1].isdigit()  # Debian's Dafny 2.3


class ToySandbox:
    """A sandbox backend registered by this test alone: provenance must ask it, not know it."""

    name = "toy"
    version = "toy-0"

    @classmethod
    def installed_version(cls, settings: object) -> str:
        return "toy-1.2"


def test_the_sandbox_reports_its_own_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import platform

    from veriloop.sandbox import SANDBOXES

    process = load_settings(paths={"home": tmp_path}, sandbox={"backend": "process"})
    assert provenance.sandbox_version(process)["version"] == platform.python_version()
    docker = load_settings(paths={"home": tmp_path}, sandbox={"backend": "docker", "docker_image": "veriloop/x:7"})
    assert provenance.sandbox_version(docker)["version"] == "veriloop/x:7"  # the image; no engine is reached
    monkeypatch.setattr(SANDBOXES, "_entries", dict(SANDBOXES))
    SANDBOXES.register("toy", f"{__name__}:ToySandbox")
    toy = load_settings(paths={"home": tmp_path}, sandbox={"backend": "toy"})
    assert provenance.sandbox_version(toy) == {"backend": "toy", "version": "toy-1.2", "python": sys.executable}
    unknown = load_settings(paths={"home": tmp_path}, sandbox={"backend": "nowhere"})
    assert provenance.sandbox_version(unknown)["version"] == ""  # a probe that fails records ""


def test_a_verifier_whose_tool_is_missing_records_an_empty_version(tmp_path: Path) -> None:
    settings = load_settings(
        paths={"home": tmp_path}, verifiers={"dafny": str(tmp_path / "no-dafny"), "verus": str(tmp_path / "no-verus")}
    )
    dafny = Task(id="d/1", suite="s", language="dafny", prompt="p", tests="")
    rust = Task(id="r/1", suite="s", language="rust", prompt="p", tests="")
    assert provenance.verifier_versions(settings, [dafny, rust]) == {"dafny": "", "verus": ""}
