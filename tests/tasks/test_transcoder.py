"""TransCoder translation suites: loading, directions, the slot convention, and the references passing for real."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from veriloop.config import Settings, load_settings
from veriloop.errors import ConfigError
from veriloop.records import ExecStatus
from veriloop.sandbox.languages import available, harness_job
from veriloop.tasks import load_suite
from veriloop.tasks.transcoder import Translation, _repair, fill_slot, gold_function, has_direction, translation


@pytest.fixture(scope="module")
def settings() -> Settings:
    return load_settings()


def _item(language: str, code: str, name: str, tests: str = "", source_name: str = "") -> Translation:
    return Translation("t", "cpp", language, "", source_name, code, name, tests)


def test_suites_need_the_data_folder(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="data_dir"):
        load_suite("transcoder", load_settings(paths={"data_dir": None}))
    with pytest.raises(ConfigError, match="transcoder_test_set"):
        load_suite("transcoder-gfg", load_settings(paths={"data_dir": tmp_path}))


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
    item = Translation(task.id, language, language, "", names[language], task.metadata["functions"][language],
                       names[language], task.metadata["tests"][language])  # fmt: skip
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
    result = asyncio.run(sandbox.run(harness_job("java", toolchain, code, harness)))  # type: ignore[attr-defined]
    assert result.status is ExecStatus.PASSED, result
