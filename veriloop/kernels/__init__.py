"""Compute kernels (any4, CommVQ, fused label-smoothed linear cross-entropy, SpecPrefill):
a PyTorch reference and a Triton kernel each. Pure compute; importing this package must not
import Triton, so CPU-only installs stay importable."""
