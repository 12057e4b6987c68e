"""The attention kernel's other builds, checked on this machine: test_cpu_attention.py runs again, in a fresh
process, on the kernel built with `-mno-avx512f` (its AVX2 loops, what an AVX2-only EPYC or Xeon gets) and with the
portable loops alone, so an AVX-512 machine tests every path CI may meet."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from veriloop.kernels.cpu_build import EXTRA_FLAGS_ENV, cpu_capabilities

HERE = Path(__file__).resolve().parent
AVX2 = "avx2" in cpu_capabilities() and "avx512_f" in cpu_capabilities()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("flags", "lanes"),
    [
        pytest.param("-mno-avx512f", 8, marks=pytest.mark.skipif(not AVX2, reason="needs an AVX-512 CPU to take from")),
        ("-mno-avx512f -DVERILOOP_PORTABLE_ATTENTION", 0),
    ],
)
def test_the_attention_suite_passes_on_the_avx2_and_portable_builds(flags: str, lanes: int, tmp_path: Path) -> None:
    env = {**os.environ, EXTRA_FLAGS_ENV: flags, "VERILOOP_EXPECT_ATTENTION_LANES": str(lanes)}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp", str(tmp_path / "pt")]
    run = subprocess.run(
        [*command, str(HERE / "test_cpu_attention.py")],
        cwd=HERE.parents[1],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert " passed" in run.stdout and "skipped" not in run.stdout, run.stdout[-2000:]
