"""TransCoder translation suites: loading, directions, the slot convention, and the references passing for real."""

from __future__ import annotations

import asyncio
import functools
import http.server
import io
import json
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from veriloop.config import Settings, load_settings
from veriloop.errors import ConfigError
from veriloop.records import ExecStatus
from veriloop.sandbox.languages import available, harness_job
from veriloop.tasks import load_suite, transcoder
from veriloop.tasks.archive import fetch_folder
from veriloop.tasks.transcoder import Translation, _repair, fill_slot, gold_function, has_direction, translation


@pytest.fixture(scope="module")
def settings() -> Settings:
    return load_settings()


def _item(language: str, code: str, name: str, tests: str = "", source_name: str = "") -> Translation:
    return Translation("t", "cpp", language, "", source_name, code, name, tests)


_PY_SCRIPT = """def f_gold(x):
    return x + 1
#TOFILL
if __name__ == '__main__':
    print("#Results: %i, %i" % (1, 1))
"""
_CPP_SCRIPT = "int f_gold(int x) {\n    return x + 1;\n}\n//TOFILL\nint main() { return 0; }\n"


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        self.server.seen.append(self.path)  # type: ignore[attr-defined]


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    """A local HTTP server (no internet in CI) serving tmp_path/www; (base URL, paths requested)."""
    www = tmp_path / "www"
    www.mkdir()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(www)))
    server.seen = []  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", server.seen  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()


def _archive(path: Path, top: str, files: dict[str, str], hostile: bool = False) -> None:
    """A GitHub-style `archive/<commit>.tar.gz`: every file under one top folder."""
    with tarfile.open(path, "w:gz") as archive:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{top}/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
        if hostile:  # a link and a path escaping the target are never written
            link = tarfile.TarInfo(f"{top}/data/transcoder_evaluation_gfg/python/LINK.py")
            link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
            archive.addfile(link)
            escape = tarfile.TarInfo(f"{top}/data/transcoder_evaluation_gfg/python/../../../../ESCAPE.py")
            escape.size = 1
            archive.addfile(escape, io.BytesIO(b"x"))


def test_suites_without_the_data_folder_download_their_archive_once(
    tmp_path: Path, served: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    base, seen = served
    gfg = "data/transcoder_evaluation_gfg"
    _archive(
        tmp_path / "www" / "codegen.tar.gz",
        "CodeGen-e3e8855",
        {
            f"{gfg}/python/ADD_ONE.py": _PY_SCRIPT,
            f"{gfg}/cpp/ADD_ONE.cpp": _CPP_SCRIPT,
            f"{gfg}/rust/src/RAW.rs": "#![register_tool(c2rust)]",
            f"{gfg}/LICENSE": "CC BY-SA 2.0",
            "codegen_sources/model.py": "unrelated",
        },
        hostile=True,
    )
    samples = json.dumps({"id": "ADD_ONE", "cpp": "int addOne(int x) { return x + 1; }", "python": "def addOne(x):"})
    _archive(
        tmp_path / "www" / "unitrans.tar.gz",
        "FSE-24-UniTrans-e0bbac5",
        {
            "cleaned_data/testable_samples.jsonl": samples + "\n",
            "cleaned_data/transcoder_evaluation_gfg/python/ADD_ONE.py": _PY_SCRIPT,
            "cleaned_data/templates/prompt.py": "unrelated",
        },
    )
    monkeypatch.setattr(transcoder, "GFG_ARCHIVE_URL", f"{base}/codegen.tar.gz")
    monkeypatch.setattr(transcoder, "UNITRANS_ARCHIVE_URL", f"{base}/unitrans.tar.gz")
    settings = load_settings(paths={"home": tmp_path / "home", "data_dir": None})

    gfg_suite = load_suite("transcoder-gfg", settings)
    (task,) = gfg_suite.tasks
    assert task.id == "transcoder-gfg/ADD_ONE" and set(task.metadata["tests"]) == {"cpp", "python"}
    assert task.metadata["functions"]["python"].startswith("def f_gold(x)")
    root = Path(gfg_suite.source)
    assert root.is_relative_to(settings.paths.cache_dir)
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name != ".complete")
    assert files == ["cpp/ADD_ONE.cpp", "python/ADD_ONE.py", "rust/src/RAW.rs"]  # no link, no escape, no code
    assert not (tmp_path / "ESCAPE.py").exists() and not any(p.is_symlink() for p in root.rglob("*"))

    (unitrans_task,) = load_suite("transcoder", settings).tasks
    assert unitrans_task.metadata["names"]["cpp"] == "addOne" and "#TOFILL" in unitrans_task.tests
    load_suite("transcoder", settings)
    load_suite("transcoder-gfg", settings)
    assert seen == ["/codegen.tar.gz", "/unitrans.tar.gz"]  # cached after the first load

    # the data folder still wins when it has the suite
    folder = tmp_path / "data" / "transcoder_test_set" / "transcoder_evaluation_gfg" / "python"
    folder.mkdir(parents=True)
    (folder / "LOCAL.py").write_text(_PY_SCRIPT)
    with_folder = load_settings(paths={"home": tmp_path / "home", "data_dir": tmp_path / "data"})
    local = load_suite("transcoder-gfg", with_folder)
    assert [t.id for t in local.tasks] == ["transcoder-gfg/LOCAL"] and len(seen) == 2


def test_offline_or_a_bad_archive_says_what_to_do(tmp_path: Path, served: tuple[str, list[str]]) -> None:
    settings = load_settings(paths={"home": tmp_path / "home", "data_dir": tmp_path})  # a folder without the suites

    def offline(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("no network", request=request)

    with pytest.raises(ConfigError, match=r"could not be fetched \(no network\); set paths\.data_dir .*--suite FILE"):
        transcoder.gfg_scripts(settings, httpx.MockTransport(offline))
    with pytest.raises(ConfigError, match=r"UniTrans.*could not be fetched"):
        transcoder.unitrans_folder(settings, httpx.MockTransport(offline))
    not_tar = httpx.MockTransport(lambda request: httpx.Response(200, content=b"<html>not an archive</html>"))
    with pytest.raises(ConfigError, match=r"not a readable tar\.gz"):
        transcoder.gfg_scripts(settings, not_tar)
    base, _ = served
    _archive(tmp_path / "www" / "other.tar.gz", "Other-1", {"README.md": "nothing here"})
    with pytest.raises(ConfigError, match="no files under data/transcoder_evaluation_gfg/"):
        fetch_folder(
            f"{base}/other.tar.gz",
            "data/transcoder_evaluation_gfg/",
            ("python/",),
            tmp_path / "t",
            what="x",
            instead="y",
        )
    assert not (tmp_path / "t").exists() and not list((tmp_path / "home").rglob("*.tar.gz"))


@pytest.mark.data("transcoder_unitrans_cleaned")
def test_unitrans_suite_holds_every_language_of_a_function(settings: Settings) -> None:
    suite = load_suite("transcoder", settings)
    assert len(suite.tasks) > 500 and suite.version.startswith("unitrans@")
    task = suite.select(ids=["transcoder/ADD_1_TO_A_GIVEN_NUMBER"]).tasks[0]
    assert set(task.metadata["functions"]) == {"cpp", "java", "python"}
    assert task.metadata["names"]["python"] == "addOne"
    item = translation(task, "java", "python")
    assert item.source.startswith("static int addOne") and item.reference.startswith("def addOne")
    assert "#TOFILL" in item.tests and '"\\n#Results' in item.tests
    assert task.language == "python" and task.prompt == task.metadata["functions"]["cpp"]
    with pytest.raises(ConfigError, match="no go function"):
        translation(task, "go", "python")
    assert sum(has_direction(t, "cpp", "python") for t in suite.tasks) > 400


@pytest.mark.data("transcoder_unitrans_cleaned")
def test_gfg_suite_has_six_languages(settings: Settings) -> None:
    suite = load_suite("transcoder-gfg", settings)
    task = suite.select(ids=["transcoder-gfg/ADD_1_TO_A_GIVEN_NUMBER"]).tasks[0]
    assert set(task.metadata["tests"]) == {"c", "cpp", "java", "python", "go", "rust"}
    assert task.metadata["functions"]["go"].startswith("func f_gold(x int) int")
    assert "//TOFILL" in task.metadata["tests"]["c"] and "#[main]" not in task.metadata["tests"]["rust"]


def test_gold_function_and_script_repairs() -> None:
    script = "int len (int arr [ ]) {return 2;}\nint f_gold ( int x ) {\n  return x;\n}\n\nint f_filled ( int x ) {}\n"
    script += "int main(void) {\n    int param0[] = {1,2,3};\n"
    script += '    printf("#Results:", " ", n_success, ", ", len(param0));\n}\n'
    repaired = _repair("c", script)
    assert "//TOFILL" in repaired and "f_filled ( int x ) {}" not in repaired
    assert 'printf("#Results: %d, %d\\n", n_success, (int)(sizeof(param0) / sizeof(param0[0])));' in repaired
    assert gold_function(repaired) == "int f_gold ( int x ) {\n  return x;\n}"
    assert "#[main]" not in _repair("rust", "#![feature(main)]\nfn f_gold() {}\n#[main]\npub fn main() {}\n")


def test_fill_slot_renames_the_entry_function() -> None:
    python = fill_slot(
        "def helper(a):\n    return a\n\ndef add_one(x):\n    return helper(x) + 1\n", _item("python", "", "addOne")
    )
    assert "def f_filled(x)" in python and "def helper(a)" in python
    recursive = fill_slot("def addOne(x):\n    return addOne(x - 1) if x else 1\n", _item("python", "", "addOne"))
    assert recursive.count("f_filled") == 2
    broken = fill_slot("def addOne(x):\n    return x +\n", _item("python", "", "other"))
    assert broken.startswith("def f_filled(x):")
    cpp = fill_slot("int addOne(int x) {\n  return x + 1;\n}", _item("cpp", "", "addOne"))
    assert cpp.startswith("int f_filled(int x)")
    renamed = fill_slot("long long plusOne(int x)\n{\n  return x + 1;\n}", _item("cpp", "", "addOne"))
    assert renamed.startswith("long long f_filled(int x)")
    java = fill_slot("import java.util.*;\nstatic int addOne(int x) { return x + 1; }", _item("java", "", "addOne"))
    assert java == "static int f_filled(int x) { return x + 1; }"


@pytest.fixture(scope="module")
def sandbox() -> Iterator[object]:
    from veriloop.sandbox.bwrap import BwrapSandbox

    box = BwrapSandbox(warm_workers=1)
    yield box
    box.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("suite", "language", "function"),
    [
        ("transcoder", "cpp", "ADD_1_TO_A_GIVEN_NUMBER"),
        ("transcoder", "java", "ADD_1_TO_A_GIVEN_NUMBER"),  # imports javafx.util.Pair: the stand-in compiles
        ("transcoder", "python", "FIND_PAIRS_GIVEN_SUM_ELEMENTS_PAIR_DIFFERENT_ROWS"),  # prints without a newline
        ("transcoder-gfg", "c", "ADD_1_TO_A_GIVEN_NUMBER"),
        ("transcoder-gfg", "go", "ADD_1_TO_A_GIVEN_NUMBER"),
        ("transcoder-gfg", "rust", "ADD_1_TO_A_GIVEN_NUMBER"),
    ],
)
@pytest.mark.bwrap
@pytest.mark.data("transcoder_unitrans_cleaned")
def test_references_pass_their_own_test_program(
    settings: Settings, sandbox: object, suite: str, language: str, function: str
) -> None:
    toolchain = sandbox.toolchain  # type: ignore[attr-defined]
    if not available(language, toolchain):
        pytest.skip(f"the {language} toolchain is not installed")
    task = load_suite(suite, settings).select(ids=[f"{suite}/{function}"]).tasks[0]
    names = task.metadata["names"]
    item = Translation(
        task.id,
        language,
        language,
        "",
        names[language],
        task.metadata["functions"][language],
        names[language],
        task.metadata["tests"][language],
    )
    job = harness_job(language, toolchain, fill_slot(item.reference, item), item.tests)
    result = asyncio.run(sandbox.run(job))  # type: ignore[attr-defined]
    assert result.status is ExecStatus.PASSED, result
    assert len(result.tests) >= 5
    wrong = fill_slot(item.reference, item).replace("f_filled", "f_unused", 1)
    broken = asyncio.run(sandbox.run(harness_job(language, toolchain, wrong, item.tests)))  # type: ignore[attr-defined]
    assert broken.status is not ExecStatus.PASSED


@pytest.mark.bwrap
@pytest.mark.slow
def test_the_javafx_pair_stand_in_behaves_like_the_real_one(sandbox: object) -> None:
    toolchain = sandbox.toolchain  # type: ignore[attr-defined]
    if not available("java", toolchain):
        pytest.skip("the java toolchain is not installed")
    harness = """import java.util.*;
import javafx.util.Pair;
public class PairCheck {
//TOFILL
    public static void main(String[] args) {
        Pair<Integer, String> p = f_filled(3);
        boolean ok = p.getKey() == 3 && p.getValue().equals("c") && p.equals(new Pair<>(3, "c"))
            && p.hashCode() == new Pair<>(3, "c").hashCode() && p.toString().equals("3=c")
            && new HashSet<>(Arrays.asList(p, new Pair<>(3, "c"))).size() == 1;
        System.out.println("VERILOOP-TEST pair " + (ok ? "PASS" : "FAIL"));
    }
}
"""
    code = 'static Pair<Integer, String> f_filled(int x) { return new Pair<>(x, "abc".substring(x - 1)); }'
    job = harness_job("java", toolchain, code, harness, trust_program_output=True)  # a test of the stand-in, no f_gold
    result = asyncio.run(sandbox.run(job))  # type: ignore[attr-defined]
    assert result.status is ExecStatus.PASSED, result
