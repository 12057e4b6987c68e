"""`veriloop bench kernels`: the memory tracker, the fused-CE section, and a small run on the real model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from veriloop.bench.kernels import PeakTensorMemory, bench_fused_ce, parse_args


def test_peak_tracker_counts_allocations_not_views() -> None:
    existing = torch.ones(1000)
    with PeakTensorMemory() as tracker:
        a = torch.ones(1000)  # 4000 bytes
        view = a[:10]
        b = existing * 2  # 4000 bytes
        del b
        c = torch.ones(500)  # 2000 bytes, after b was freed
        existing.add_(1)  # in place: nothing new
    assert tracker.peak == 8000
    assert tracker.current == 6000
    assert view.numel() == 10 and c.numel() == 500


def test_peak_tracker_works_on_meta_tensors() -> None:
    with PeakTensorMemory() as tracker:
        x = torch.empty(1024, 1024, device="meta")
        y = x @ x
    assert tracker.peak == 2 * 4 * 1024 * 1024
    assert y.device.type == "meta"


@pytest.mark.slow
def test_fused_ce_section_on_cpu_and_meta() -> None:
    args = parse_args(["--only", "fused_ce", "--ce-tokens", "64,4096", "--ce-run-tokens", "64"])
    out = bench_fused_ce(args, "cpu")
    assert out["measured_on"] == {"64": "cpu", "4096": "meta"}
    assert set(out["peak_memory_ratio"]) == {"64", "4096"}
    assert out["peak_memory_ratio"]["4096"] > 8  # both hold the V×H weight gradient; naive adds ~3× the logits
    assert out["peak_memory_ratio"]["64"] > 0.9
    assert out["max_abs_diff"] is not None and out["max_abs_diff"] < 1e-4
    assert out["max_abs_diff_tokens"] == 64


def test_unknown_section_is_a_usage_error() -> None:
    with pytest.raises(SystemExit):
        parse_args(["--only", "any5"])
    with pytest.raises(SystemExit):
        parse_args(["--any4-methods", "nf4,int8"])


def test_default_arguments_cover_every_reported_key() -> None:
    args = parse_args([])
    assert args.sections == ["any4", "fused_ce", "commvq", "specprefill"]
    assert args.any4_methods == ["int4", "nf4", "fp4", "any4", "any3", "any2"]
    assert args.ce_tokens == [2048, 8192, 32768]


@pytest.mark.slow
@pytest.mark.model
def test_bench_kernels_on_the_embedded_model(
    model_home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from veriloop.cli import main

    argv = [
        "--only=any4,fused_ce,commvq,specprefill",
        "--texts=2",
        "--any4-methods=nf4,any4",
        "--any4-iters=3",
        "--ce-tokens=128,32768",
        "--ce-run-tokens=128",
        "--commvq-calib-tokens=96",
        "--commvq-stages=2",
        "--commvq-em-iters=2",
        "--sp-problems=1",
        "--sp-tokens=320",
        "--speculator-layers=4",
        "--look-ahead=2",
        "--max-new-tokens=4",
    ]
    monkeypatch.setenv("VERILOOP_PATHS__HOME", str(model_home))  # the session's converted model
    assert main(["bench", "kernels", *argv]) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result["any4"]["perplexity"]) == {"fp32", "nf4", "any4"}
    assert result["any4"]["perplexity"]["any4"] < 2 * result["any4"]["perplexity"]["fp32"]
    assert set(result["fused_ce"]["peak_memory_ratio"]) == {"128", "32768"}
    assert result["fused_ce"]["peak_memory_ratio"]["32768"] > 16
    assert isinstance(result["fused_ce"]["max_abs_diff"], float)
    assert set(result["commvq"]["kv_bytes_per_token"]) >= {"full", "commvq"}
    assert result["commvq"]["kv_bytes_per_token"]["commvq"] < result["commvq"]["kv_bytes_per_token"]["full"]
    assert set(result["commvq"]["perplexity"]) == {"full", "commvq"}
    assert set(result["specprefill"]["ttft_s"]) == {"full", "specprefill"}
    assert set(result["specprefill"]["quality"]) == {"full", "specprefill"}


@pytest.mark.slow
def test_meta_sizes_report_no_time_and_stay_strict_json() -> None:
    out = bench_fused_ce(parse_args(["--ce-tokens", "64,4096", "--ce-run-tokens", "64"]), "cpu")
    assert out["time_s"]["naive"]["4096"] is None and out["time_s"]["fused"]["64"] is not None
    assert set(out["speedup"]) == {"64"}
    json.dumps(out, allow_nan=False)
