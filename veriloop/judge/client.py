"""A small client for veriloop's judge API (`POST /api/judge`), with retries.

    from veriloop.judge import JudgeClient
    with JudgeClient("http://127.0.0.1:8000", token="...") as judge:
        verdicts = judge.judge([{"code": "def add(a, b): return a + b", "tests": "assert add(1, 2) == 3"}])

It retries what is worth retrying (429 after its `Retry-After`, 502/503/504, lost connections) with
exponential back-off, follows a batch that the server turned into a job until it ends, and returns
the verdicts as plain dicts in the candidates' order. 4xx answers other than 429 raise `JudgeError`
at once: the request itself is wrong. Only `httpx` is needed, so trainers can use it on their own.
"""

from __future__ import annotations

import random
import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

RETRY_STATUS = frozenset({429, 502, 503, 504})


class JudgeError(Exception):
    """The judge refused the request, or kept failing after every retry."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def _plain(candidate: Any) -> dict[str, Any]:
    if isinstance(candidate, Mapping):
        return dict(candidate)
    dump = getattr(candidate, "model_dump", None)
    if dump is None:
        raise TypeError(f"a candidate is a dict or a pydantic model, not {type(candidate).__name__}")
    plain: dict[str, Any] = dump(mode="json", exclude_none=True)
    return plain


class JudgeClient:
    """Synchronous client (TRL's reward functions are synchronous); thread-safe like `httpx.Client`."""

    def __init__(
        self,
        base_url: str = "http://127.0.0.1:8000",
        *,
        token: str | None = None,
        timeout_s: float = 600.0,
        retries: int = 5,
        backoff_s: float = 0.5,
        poll_s: float = 0.5,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s, transport=transport)
        self.retries = retries
        self.backoff_s = backoff_s
        self.poll_s = poll_s
        self.timeout_s = timeout_s

    def __enter__(self) -> JudgeClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def _wait(self, attempt: int, response: httpx.Response | None) -> None:
        delay = self.backoff_s * (2**attempt) * (0.5 + random.random())
        if response is not None and response.headers.get("retry-after", "").isdigit():
            delay = max(delay, float(response.headers["retry-after"]))
        time.sleep(min(delay, 60.0))

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        """One API call with retries; the JSON body of the answer."""
        last = "no attempt made"
        for attempt in range(self.retries + 1):
            response: httpx.Response | None = None
            try:
                response = self.http.request(method, path, **kwargs)
            except (httpx.TransportError, httpx.TimeoutException) as exc:
                last = f"{type(exc).__name__}: {exc}"
            else:
                if response.status_code < 400:
                    return response.json()
                last = _message(response)
                if response.status_code not in RETRY_STATUS:
                    raise JudgeError(f"{response.status_code}: {last}", response.status_code)
            if attempt < self.retries:
                self._wait(attempt, response)
        raise JudgeError(f"gave up after {self.retries + 1} attempts: {last}")

    def judge(
        self,
        candidates: Sequence[Any],
        *,
        reward: Mapping[str, Any] | None = None,
        mode: str = "auto",
        store: bool = False,
        model: str | None = None,
        security: bool = True,
    ) -> list[dict[str, Any]]:
        """One verdict per candidate, in order (a job is followed until it ends)."""
        if not candidates:
            return []
        body: dict[str, Any] = {
            "candidates": [_plain(c) for c in candidates],
            "mode": mode,
            "store": store,
            "security": security,
        }
        if reward:
            body["reward"] = dict(reward)
        if model:
            body["model"] = model
        answer = self.request("POST", "/api/judge", json=body)
        if "results" in answer and "id" not in answer:
            results: list[dict[str, Any]] = answer["results"]
            return results
        return self.wait_job(str(answer["id"]))

    def wait_job(self, job_id: str) -> list[dict[str, Any]]:
        deadline = time.monotonic() + self.timeout_s
        while True:
            job = self.request("GET", f"/api/judge/jobs/{job_id}")
            if job["status"] == "finished":
                results: list[dict[str, Any]] = job["results"]
                return results
            if job["status"] != "running":
                raise JudgeError(f"judge job {job_id} {job['status']}: {job.get('error') or ''}".rstrip(": "))
            if time.monotonic() > deadline:
                self.request("DELETE", f"/api/judge/jobs/{job_id}")
                raise JudgeError(f"judge job {job_id} did not finish within {self.timeout_s:g} s")
            time.sleep(self.poll_s)


def _message(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return response.text[:300]
