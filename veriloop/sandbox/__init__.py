"""Sandboxed execution of generated code (bubblewrap, Docker, and an opt-in unsafe process backend)."""
