"""veriloop: agentic code generation and verification.

Subpackages, from the face down (imports point down this list, never up):
`cli` and `service` (face); `agents` and `training` (methods); `judge`, `search`, `tasks`,
`verifiers`, `llm` (machinery); `sandbox`, `kernels`, `store` (ground); and the core
modules `records`, `errors`, `config`.
"""

__version__ = "0.1.0"

from veriloop import _astguard

_astguard.install()
