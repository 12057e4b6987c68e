"""Compute kernels (any4, CommVQ, fused label-smoothed linear cross-entropy, SpecPrefill), each with a
PyTorch reference. any4's dequantise-matmul and the fused cross-entropy also have a Triton kernel
(`_any4_triton.py`, `_fused_ce_triton.py`); CommVQ and SpecPrefill are PyTorch only. Pure compute;
importing this package must not import Triton, so CPU-only installs stay importable."""
