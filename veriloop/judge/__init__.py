"""The judge: verdicts, rewards and security findings for candidates sent from outside (an RL trainer's
rollouts), and the client for its HTTP API. The HTTP face itself is `veriloop.service.judge`.

`engine` is the judge proper (`Judge`, its request and verdict models, the reward rules), `security` is bandit's
scan, `client` is `JudgeClient` for `POST /api/judge`. The names below load their module on first use, so that
`from veriloop.judge import JudgeClient` needs only `httpx`, not the sandbox and verifiers the engine imports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from veriloop.judge.client import JudgeClient, JudgeError
    from veriloop.judge.engine import (
        Judge,
        JudgeCandidate,
        JudgeLimits,
        RewardOptions,
        StdioTest,
        Verdict,
        exec_reward,
        verify_reward,
        without_evidence,
    )
    from veriloop.judge.security import Finding, Severity, counted, scan_python

_HOMES = {
    "JudgeClient": "client",
    "JudgeError": "client",
    "Judge": "engine",
    "JudgeCandidate": "engine",
    "JudgeLimits": "engine",
    "RewardOptions": "engine",
    "StdioTest": "engine",
    "Verdict": "engine",
    "exec_reward": "engine",
    "verify_reward": "engine",
    "without_evidence": "engine",
    "Finding": "security",
    "Severity": "security",
    "counted": "security",
    "scan_python": "security",
}

__all__ = [
    "Finding",
    "Judge",
    "JudgeCandidate",
    "JudgeClient",
    "JudgeError",
    "JudgeLimits",
    "RewardOptions",
    "Severity",
    "StdioTest",
    "Verdict",
    "counted",
    "exec_reward",
    "scan_python",
    "verify_reward",
    "without_evidence",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value
