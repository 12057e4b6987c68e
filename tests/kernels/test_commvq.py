"""CommVQ: RoPE commutativity of the key codebook, key/value reconstruction, the model hooks."""

from __future__ import annotations

import itertools
import math

import torch
from torch import nn

from veriloop.kernels.commvq import (
    CommVQ,
    KeyCodebook,
    ValueCodec,
    _pack_bits,
    _unpack_bits,
    apply_rope,
    attach_commvq_,
    collect_kv,
    fit_commvq,
    fit_key_codebook,
    fit_value_codec,
    from_pairs,
    pair_matrix,
    rope_phase,
    to_pairs,
)
from veriloop.testing import tiny_causal_lm


def _inv_freq(dim: int, base: float = 10000.0) -> torch.Tensor:
    return 1.0 / base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)


def _random_codebook(groups: int = 2, stages: int = 3, size: int = 4, pairs: int = 8) -> KeyCodebook:
    gen = torch.Generator().manual_seed(0)
    shape = (groups, stages, size, pairs)
    za = torch.complex(torch.randn(shape, generator=gen), torch.randn(shape, generator=gen))
    zb = torch.complex(torch.randn(shape, generator=gen), torch.randn(shape, generator=gen))
    return KeyCodebook(za, zb)


def test_apply_rope_matches_transformers_rotate_half() -> None:
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    x = torch.randn(1, 2, 5, 16)
    positions = torch.tensor([0, 3, 7, 100, 4000])
    angles = positions[:, None].double() * _inv_freq(16).double()
    cos = torch.cat([angles.cos(), angles.cos()], -1)[None].float()
    sin = torch.cat([angles.sin(), angles.sin()], -1)[None].float()
    _, expected = apply_rotary_pos_emb(x, x, cos, sin)
    assert torch.allclose(apply_rope(x, positions, _inv_freq(16)), expected, atol=1e-5)


def test_a_rotated_codebook_keeps_its_structure() -> None:
    book = _random_codebook(groups=1, stages=1, size=3, pairs=4)
    phase = rope_phase(torch.tensor(11), _inv_freq(8))
    rotated = book.rotated(phase)
    assert torch.allclose(rotated.centres(0), book.centres(0) * phase, atol=1e-5)


def test_pair_matrices_commute_with_rotations() -> None:
    centre = torch.complex(torch.randn(6), torch.randn(6))
    rotation = pair_matrix(rope_phase(torch.tensor(37), _inv_freq(12)))
    assert torch.allclose(pair_matrix(centre) @ rotation, rotation @ pair_matrix(centre), atol=1e-6)


def test_rotate_then_decode_equals_decode_then_rotate() -> None:
    book = _random_codebook()
    codes = torch.randint(0, 4, (2, 5, 3, 2))
    positions = torch.tensor([0, 1, 9, 250, 8191])
    inv_freq = _inv_freq(16)
    phase = rope_phase(positions, inv_freq)  # (5, P)
    decoded_then_rotated = from_pairs(book.decode(codes) * phase)
    rotated_then_decoded = from_pairs(book.rotated(phase).decode(codes))
    assert torch.allclose(rotated_then_decoded, decoded_then_rotated, atol=1e-5)
    # the same through the cache codec, whose keys are (B, H, S, d)
    commvq = CommVQ([book], ValueCodec(1, 16), torch.ones(1, 2, 16), head_dim=16)
    keys = torch.randn(1, 2, 5, 16)
    key_codes, norms = commvq.encode_keys(0, keys)
    plain = commvq.decode_keys(0, key_codes, norms)
    rotated = commvq.decode_keys(0, key_codes, norms, positions=positions, inv_freq=inv_freq)
    assert torch.allclose(rotated, apply_rope(plain, positions, inv_freq), atol=1e-4)


def test_structured_distances_match_explicit_centres() -> None:
    book = _random_codebook(groups=1, stages=1, size=5, pairs=4)
    x = torch.complex(torch.randn(1, 7, 4), torch.randn(1, 7, 4))
    codes = book.encode(x)
    centres = book.centres(0).reshape(1, 25, 4)
    best = (x[:, :, None] - centres[:, None]).abs().pow(2).sum(-1).argmin(-1)
    assert torch.equal(codes[0, :, 0, 0] * 5 + codes[0, :, 0, 1], best[0])


def _low_rank_keys(groups: int, n: int, pairs: int, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    basis = torch.randn(groups, 6, 2 * pairs, generator=gen)
    keys = torch.randn(groups, n, 6, generator=gen) @ basis + 0.05 * torch.randn(groups, n, 2 * pairs, generator=gen)
    keys = keys / keys.norm(dim=-1, keepdim=True)
    return to_pairs(keys)


def test_key_codebook_error_falls_with_stages() -> None:
    x = _low_rank_keys(groups=2, n=400, pairs=8)
    book = fit_key_codebook(x, stages=4, codebook_size=8, iters=6)
    errors = []
    for stages in range(1, 5):
        partial = KeyCodebook(book.za[:, :stages], book.zb[:, :stages])
        rec = partial.decode(partial.encode(x))
        errors.append(((rec - x).abs().pow(2).sum(-1).mean() / x.abs().pow(2).sum(-1).mean()).item())
    assert errors[0] < 0.6
    assert all(b < a for a, b in itertools.pairwise(errors))
    assert errors[-1] < 0.15
    assert book.bits_per_vector() == 4 * 2 * 3


def test_value_codec_reconstructs_and_refinement_helps() -> None:
    gen = torch.Generator().manual_seed(1)
    mix = torch.randn(2, 16, 16, generator=gen) * torch.linspace(0.2, 2, 16)
    x = torch.randn(2, 600, 16, generator=gen) @ mix + 0.2
    x = x / x.norm(dim=-1, keepdim=True)
    codec = fit_value_codec(x, bits=2, rounds=3, sweeps=2, steps=20)
    err = ((codec.decode(codec.encode(x)) - x).pow(2).sum(-1).mean()).item()
    codec.refine_sweeps = 0
    err_encoder_only = ((codec.decode(codec.encode(x)) - x).pow(2).sum(-1).mean()).item()
    assert err < 0.1
    assert err <= err_encoder_only


def test_bit_packing_round_trip() -> None:
    bits = torch.randint(0, 2, (7, 37), dtype=torch.uint8)
    packed = _pack_bits(bits)
    assert packed.shape == (7, 5)
    assert torch.equal(_unpack_bits(packed, 37), bits)


def _tiny_llama() -> nn.Module:
    model, _ = tiny_causal_lm(seed=0, layers=2, hidden=32)
    assert isinstance(model, nn.Module)
    return model


def test_commvq_on_a_llama_model() -> None:
    model = _tiny_llama()
    ids = torch.randint(0, 259, (1, 96), generator=torch.Generator().manual_seed(2))
    calibration = collect_kv(model, ids, head_dim=8)
    assert calibration.keys.shape == (2, 2, 96, 8) and calibration.values.shape == (2, 2, 96, 8)
    commvq = fit_commvq(calibration, key_stages=6, codebook_size=8, em_iters=5, value_rounds=2, value_steps=10)
    stored = commvq.compress(1, calibration.keys[1][None], calibration.values[1][None])
    assert stored.key_codes.dtype == torch.uint8 and stored.key_codes.shape == (1, 2, 96, 5)  # 6 stages × 2 × 3 bits
    assert stored.key_norms.dtype == torch.float16 and stored.value_bits.shape == (1, 2, 96, 2)
    keys, values = commvq.decompress(1, stored)
    key_err = ((keys - calibration.keys[1]).pow(2).sum() / calibration.keys[1].pow(2).sum()).item()
    value_err = ((values - calibration.values[1]).pow(2).sum() / calibration.values[1].pow(2).sum()).item()
    assert key_err < 0.1 and value_err < 0.3
    per_token = commvq.bytes_per_token(kv_heads=2)
    assert per_token == 2 * 2 * (5 + 2 + 4)
    assert stored.nbytes() * 2 / 96 == per_token  # what compress really stores, two layers
    with torch.no_grad():
        before = model(input_ids=ids).logits
        remove = attach_commvq_(model, commvq)
        during = model(input_ids=ids).logits
        remove()
        after = model(input_ids=ids).logits
    assert torch.equal(before, after)
    assert not torch.equal(before, during)
    coarse = fit_commvq(
        calibration, key_stages=1, codebook_size=2, em_iters=2, value_bits=1, value_rounds=1, value_steps=1
    )
    with torch.no_grad():
        remove = attach_commvq_(model, coarse)
        coarse_logits = model(input_ids=ids).logits
        remove()
    # the double's large random weights amplify errors; a finer cache must still stay closer
    assert (during - before).norm() < 0.8 * before.norm()
    assert (during - before).norm() < 0.8 * (coarse_logits - before).norm()
    assert math.isfinite(during.sum().item())


def test_key_encoding_with_precomputed_stage_tables_gives_the_same_codes() -> None:
    """`KeyCodebook.encode` reuses each stage's codebook-only terms: the codes of recomputing them every
    call, bit for bit, for a few vectors (the live cache's decode steps) and for many; a changed codebook
    gets new tables."""
    from veriloop.kernels.commvq import _gather_rows, _nearest_pair

    def reference(book: KeyCodebook, x: torch.Tensor) -> torch.Tensor:
        residual, codes = x.clone(), []
        for stage in range(book.stages):
            a, b = _nearest_pair(residual, book.za[:, stage], 1j * book.zb[:, stage])
            codes.append(torch.stack([a, b], dim=-1))
            residual = residual - _gather_rows(book.za[:, stage], a) - 1j * _gather_rows(book.zb[:, stage], b)
        return torch.stack(codes, dim=2)

    book = _random_codebook(groups=3, stages=6, size=16, pairs=32)
    gen = torch.Generator().manual_seed(3)
    for n in (1, 4, 300):
        x = torch.complex(torch.randn(3, n, 32, generator=gen), torch.randn(3, n, 32, generator=gen)) * 0.2
        assert torch.equal(book.encode(x), reference(book, x))
    book.za.mul_(-1)  # in place: the cached tables must follow
    x = torch.complex(torch.randn(3, 50, 32, generator=gen), torch.randn(3, 50, 32, generator=gen))
    assert torch.equal(book.encode(x), reference(book, x))


def test_value_refinement_with_per_group_tables_gives_the_same_codes() -> None:
    """`ValueCodec.refine` keeps each group's options, norms and transposed tables once per call: the
    categories of the plain loop, bit for bit, for all layers or one, few vectors or many."""

    def reference(
        codec: ValueCodec, x: torch.Tensor, cats: torch.Tensor, sweeps: int, layer: int | None
    ) -> torch.Tensor:
        options = codec.options(layer)
        norms = options.pow(2).sum(-1)
        cats = cats.clone()
        gather_idx = cats[..., None, None].expand(-1, -1, -1, 1, codec.dim)
        chosen = options[:, None].expand(-1, x.shape[1], -1, -1, -1).gather(3, gather_idx).squeeze(3)
        residual = x - codec._rows(codec.bias, layer) - chosen.sum(2)
        for _ in range(sweeps):
            for group in range(codec.n_cat):
                target = residual + chosen[:, :, group]
                scores = norms[:, group][:, None, :] - 2 * target @ options[:, group].transpose(1, 2)
                best = scores.argmin(-1)
                new = options[:, group].gather(1, best[..., None].expand(-1, -1, codec.dim))
                residual = target - new
                chosen[:, :, group] = new
                cats[:, :, group] = best
        return cats

    gen = torch.Generator().manual_seed(4)
    codec = ValueCodec(2, 32)
    with torch.no_grad():
        codec.bias.copy_(torch.randn(codec.bias.shape, generator=gen) * 0.1)
        for n, layer, sweeps in ((3, 1, 2), (8, None, 2), (200, 0, 3), (5, 1, 0)):
            groups = 2 if layer is None else 1
            x = torch.randn(groups, n, 32, generator=gen)
            x = x / x.norm(dim=-1, keepdim=True)
            cats = torch.randint(0, 4, (groups, n, codec.n_cat), generator=gen)
            assert torch.equal(codec.refine(x, cats, sweeps, layer), reference(codec, x, cats, sweeps, layer))
