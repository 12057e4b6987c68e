"""The llama.cpp peer of `veriloop bench llm --peer llama_cpp` against a fake `llama-server` (no llama.cpp build in
CI), and the names `bench llm` gives the kernels it ran."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from veriloop.bench import _llama_cpp as peer
from veriloop.errors import BackendError
from veriloop.llm import packed

FAKE = Path(__file__).with_name("fake_llama_server.py")


@pytest.fixture
def fake_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An executable `llama-server` that runs the fake, named by VERILOOP_LLAMA_SERVER."""
    binary = tmp_path / "llama-server"
    binary.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE}" "$@"\n')
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv(peer.SERVER_ENV, str(binary))
    return binary


def test_the_server_named_by_the_environment_is_used_and_nothing_is_built(fake_server: Path, tmp_path: Path) -> None:
    assert peer.ensure_llama_server(tmp_path / "cache", build=False) == fake_server
    assert "version" in peer.server_version(fake_server)
    assert not (tmp_path / "cache" / "llama.cpp").exists()


def test_a_missing_server_without_build_says_how_to_get_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(peer.SERVER_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no llama-server on PATH
    with pytest.raises(BackendError, match="VERILOOP_LLAMA_SERVER"):
        peer.ensure_llama_server(tmp_path / "cache", build=False)
    cached = peer.cache_root(tmp_path / "cache") / "bin" / "llama-server"
    cached.parent.mkdir(parents=True)
    cached.write_text("")
    assert peer.ensure_llama_server(tmp_path / "cache", build=False) == cached


def test_peer_run_reports_the_issue_keys_and_counts_tokens_as_veriloop_does(fake_server: Path, tmp_path: Path) -> None:
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    prompts = [[2, 5, 6], [3, 4], [4, 4, 4, 4], [5]]  # odd first ids stop early (as on the fence) at 8 of 16
    with peer.llama_server(fake_server, gguf, slots=8, context=2048, threads=1, log=tmp_path / "server.log") as server:
        assert "-np" in server.command and server.command[server.command.index("-np") + 1] == "8"
        result = peer.run_peer(
            server,
            prompts,
            max_tokens=16,
            stop=["```"],
            concurrencies=(1, 8),
            count=lambda ids: len(ids) - 1,  # as if the last id were the stop token
            echo=lambda message: None,
        )
        pid = server.process.pid
    assert server.process.poll() is not None  # stopped with the block
    assert set(result["tokens_per_s"]) == {"batch_1", "in_flight_8"}
    assert result["useful_tokens"] == {"batch_1": 15 + 7 + 15 + 7, "in_flight_8": 44}
    for name, rate in result["tokens_per_s"].items():
        # seconds are rounded to 10 ms
        assert rate * result["seconds"][name] == pytest.approx(result["useful_tokens"][name], abs=rate * 0.006)
    assert result["tokens_per_s"]["in_flight_8"] > result["tokens_per_s"]["batch_1"]  # the fake serves in parallel
    assert 0 < result["ttft_s"] < 5
    assert result["peak_rss_mb"] is None or result["peak_rss_mb"] > 1
    assert result["server_timings_mean"]["batch_1"]["prompt_n"] == pytest.approx(2.5)
    assert pid > 0


def test_useful_tokens_without_ids_leave_out_the_token_that_stopped_the_answer() -> None:
    assert peer.useful_tokens({"tokens_predicted": 10, "stop_type": "eos"}, None) == 9
    assert peer.useful_tokens({"tokens_predicted": 10, "stop_type": "word"}, None) == 9
    assert peer.useful_tokens({"tokens_predicted": 10, "stop_type": "limit"}, None) == 10
    assert peer.useful_tokens({"tokens": [1, 2, 3], "tokens_predicted": 3}, lambda ids: len(ids)) == 3


def test_the_best_thread_count_gives_each_figure() -> None:
    one = {"tokens_per_s": {"batch_1": 45.0, "in_flight_8": 90.0}, "ttft_s": 0.5, "peak_rss_mb": 200.0}
    two = {"tokens_per_s": {"batch_1": 30.0, "in_flight_8": 120.0}, "ttft_s": 0.4, "peak_rss_mb": 210.0}
    best = peer.best_of_threads({1: one, 2: two})
    assert best["tokens_per_s"] == {"batch_1": 45.0, "in_flight_8": 120.0}
    assert best["threads_of_best"] == {"batch_1": 1, "in_flight_8": 2}
    assert best["ttft_s"] == 0.4 and best["peak_rss_mb"] == 210.0
    assert best["by_threads"] == {"1": one, "2": two}


def test_thread_plan_runs_each_count_where_asked() -> None:
    assert peer.peer_thread_plan("", 2, (1, 8)) == {1: (1, 8), 2: (1, 8)}
    assert peer.peer_thread_plan("", 1, (1, 8)) == {1: (1, 8)}
    assert peer.peer_thread_plan("1,2@8", 2, (1, 8)) == {1: (1, 8), 2: (8,)}
    with pytest.raises(ValueError, match="peer-threads"):
        peer.peer_thread_plan("2@4", 2, (1, 8))


def test_ratios_are_veriloop_over_llama_cpp() -> None:
    got = peer.ratios({"batch_1": 40.0, "in_flight_8": 150.0}, {"batch_1": 50.0, "in_flight_8": 100.0})
    assert got == {"batch_1": 0.8, "in_flight_8": 1.5}
    assert peer.ratios({"batch_1": 1.0}, {"batch_1": 0.0}) == {"batch_1": None}


def test_a_server_that_exits_is_reported_with_its_log(tmp_path: Path) -> None:
    binary = tmp_path / "llama-server"
    binary.write_text("#!/bin/sh\necho 'error: cannot load model' >&2\nexit 3\n")
    binary.chmod(0o755)
    with (
        pytest.raises(BackendError, match="cannot load model"),
        peer.llama_server(binary, tmp_path / "m.gguf", slots=1, context=512, threads=1, log=tmp_path / "log"),
    ):
        pass


def test_machine_names_the_cpu_and_its_flags() -> None:
    found = peer.machine()
    assert set(found["flags"]) >= {"avx2", "avx512f", "avx512_bf16", "amx_bf16"}
    if Path("/proc/cpuinfo").is_file():
        assert found["cpu"] != "unknown"
    assert found["cpus"] == os.cpu_count()
    assert packed.cpu_flags().keys() == {"avx2", "avx512f", "avx512_bf16", "amx_bf16"}


def test_peak_rss_reads_vmhwm_of_a_live_process() -> None:
    rss = peer.peak_rss_mb(os.getpid())
    if Path("/proc/self/status").is_file():
        assert rss is not None and rss > 10
    assert peer.peak_rss_mb(2**22 + 12345) is None


def test_attention_kernel_names_follow_the_built_loops_and_the_head_shape() -> None:
    name = packed.attention_kernel_name
    assert name(True, 64, 3, 16) == "veriloop_cpu_attention (AVX-512, 16 lanes)"
    assert name(True, 64, 7, 8) == "veriloop_cpu_attention (AVX2, 2 x 8 lanes)"
    assert name(True, 64, 3, 0) == "veriloop_cpu_attention (portable C++ loop)"
    assert name(True, 72, 3, 16) == "veriloop_cpu_attention (portable C++ loop)"
    assert name(True, 64, 12, 8) == "veriloop_cpu_attention (portable C++ loop)"
    assert name(False, 64, 3, 16) == "torch_sdpa"


def test_product_names_follow_the_kind_the_decoder_picks(monkeypatch: pytest.MonkeyPatch) -> None:
    assert packed.products_name("float32", fused=False) == packed.FLOAT32_PRODUCTS
    assert packed.products_name("bfloat16", fused=False) == packed.FLOAT32_PRODUCTS
    monkeypatch.setattr(packed.BrainDotLinear, "kernel_available", staticmethod(lambda: True))
    assert packed.products_name("bfloat16", fused=True).startswith("veriloop_bf16")
    monkeypatch.setattr(packed.BrainDotLinear, "kernel_available", staticmethod(lambda: False))
    assert packed.products_name("bfloat16", fused=True).startswith("onednn_bf16")  # an AVX2 machine's bf16 setting
    assert packed.products_name("float16", fused=True).startswith("fbgemm_fp16")


def test_kernels_used_names_a_real_decoder_and_its_flags() -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=64,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    decoder = packed.PackedDecoder(model, "float16", attention_kernel=False)
    found = packed.kernels_used(decoder)
    assert set(found) == {"attention", "decode_products", "prefill_products", "cpu_flags"}
    assert found["attention"] == "torch_sdpa"
    assert found["cpu_flags"] == packed.cpu_flags()
    fused = decoder.fused_linears > 0
    assert found["decode_products"] == packed.products_name(decoder.weights, fused)
    exact = packed.kernels_used(packed.PackedDecoder(model, "float32", attention_kernel=False))
    assert exact["decode_products"] == exact["prefill_products"] == packed.FLOAT32_PRODUCTS
