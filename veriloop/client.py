"""Compatibility path: the judge's HTTP client lives in `veriloop.judge.client`. `from veriloop.client import
JudgeClient` still works; new code imports it from `veriloop.judge`."""

from veriloop.judge.client import RETRY_STATUS, JudgeClient, JudgeError

__all__ = ["RETRY_STATUS", "JudgeClient", "JudgeError"]
