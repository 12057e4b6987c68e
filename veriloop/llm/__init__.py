"""Shared inference backend: a Backend protocol, a registry by name, and the implementations
`embedded` (a bundled Qwen2.5-Coder or SmolLM2 model via transformers, continuous batching), `openai` (any
OpenAI-compatible server), `vllm` (in-process, GPU extra) and `llama_cpp`
(llama.cpp's llama-server on the model's GGUF)."""

from veriloop.llm.base import BACKENDS, Backend, get_backend

__all__ = ["BACKENDS", "Backend", "get_backend"]
