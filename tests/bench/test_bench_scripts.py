"""The kernel and device benchmarks (`veriloop bench bf16_linear`, `llm_step`, `gpu_llm`): they run through the CLI
like every other benchmark, and say why when they cannot."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from veriloop.bench import bf16_linear, llm_step
from veriloop.config import Settings


def _cli(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "veriloop.cli", "bench", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message a machine without CUDA gets")
def test_gpu_bench_says_it_needs_cuda_and_exits_2() -> None:
    run = _cli("gpu_llm", timeout=120)
    assert run.returncode == 2
    assert "needs a CUDA device" in run.stderr
    assert run.stdout == ""


@pytest.mark.slow
@pytest.mark.model
def test_step_bench_times_each_row_count_for_each_thread_count(model_settings: Settings) -> None:
    result = llm_step.main(model_settings, ["--rows", "1,3", "--threads", "1,2", "--columns", "20", "--repeats", "1"])
    torch.set_num_threads(1)
    for threads in (1, 2):
        run = result[f"threads_{threads}"]
        assert set(run["step_ms"]) == set(run["products_ms"]) == {1, 3}
        assert all(value > 0 for value in [*run["step_ms"].values(), *run["products_ms"].values()])
        assert run["step_speedup"][1] == 1.0
        # (from the unrounded times: the rounded ones printed may give a last digit of difference)
        assert run["step_speedup"][3] == pytest.approx(3 * run["step_ms"][1] / run["step_ms"][3], abs=0.02)
    assert result["columns"] == 20 and result["scripted"] is True
    assert result["kv_dtype"] == ("float16" if result["attention_kernel"] else "float32")
    if result["attention_kernel"]:
        run = result["threads_1"]
        assert set(run["step_ms_pytorch_attention"]) == set(run["attention_kernel_speedup"]) == {1, 3}
        speedup = run["step_ms_pytorch_attention"][3] / run["step_ms"][3]
        assert run["attention_kernel_speedup"][3] == pytest.approx(speedup, abs=0.02)
    if result["linear_weights"] == "bfloat16":  # the default where the AVX512-BF16 kernel builds: FBGEMM beside it
        run = result["threads_1"]
        assert set(run["step_ms_fp16_weights"]) == set(run["products_ms_fp16_weights"]) == {1, 3}
        speedup = run["step_ms_fp16_weights"][3] / run["step_ms"][3]
        assert run["bf16_kernel_speedup"][3] == pytest.approx(speedup, abs=0.02)
    plain = llm_step.main(
        model_settings, ["--rows", "1", "--threads", "1", "--columns", "20", "--repeats", "1", "--python-loop"]
    )
    assert plain["scripted"] is False and plain["threads_1"]["step_ms"][1] > 0


def test_bf16_linear_bench_times_each_kernel_at_each_row_count() -> None:
    from veriloop.kernels import cpu_bf16

    if not cpu_bf16.available():
        run = _cli("bf16_linear", timeout=300)
        assert run.returncode == 2 and "AVX512-BF16" in run.stderr
        return
    result = bf16_linear.main(None, ["--rows", "1,3", "--layers", "2", "--rounds", "1", "--passes", "1"])
    torch.set_num_threads(1)
    ms = result["ms"]
    assert (
        set(ms["bf16_kernel"]) == set(ms["fbgemm_fp16"]) == set(ms["onednn_bf16"]) == set(result["speedup"]) == {1, 3}
    )
    assert all(value > 0 for kernel in ms.values() for value in kernel.values())
    assert result["speedup_vs_onednn"][3] == pytest.approx(ms["onednn_bf16"][3] / ms["bf16_kernel"][3], rel=0.05)
    assert result["speedup"][3] == pytest.approx(ms["fbgemm_fp16"][3] / ms["bf16_kernel"][3], rel=0.05)
    assert result["rows_cost_vs_one_row"]["bf16_kernel"][1] == 1.0
