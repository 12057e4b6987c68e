"""A bounded load test of `POST /api/judge` on loopback: 2,000 candidates from 8 concurrent clients.

The mix: half passing, 30% failing, hostile programs (memory, output floods, killing the runner, early exit,
patched builtins, writes to the host, fork bombs; each with a wrong `add`, so passing would be a wrong verdict)
and timeouts. Every request must be answered, every candidate get exactly one verdict at its
index, no verdict be wrong (only the passing half passes; nothing is infra_error), and the server's
resident memory end within 10% of where it stood after warming up. It stops by itself (about a minute
on two cores); the server is a real `veriloop serve` process.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from veriloop.judge.client import JudgeClient
from veriloop.testing import served

CLIENTS = 8
PER_CLIENT = 250
BATCH = 25
TESTS = "assert add(1, 2) == 3\nassert add(-1, 1) == 0\n"
HOSTILE = [
    "x = bytearray(2 << 30)\n",
    "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n",
    "import os\nos.kill(os.getppid(), 9)\n",
    "import sys\nsys.exit(0)\n",
    "import os, signal\nos.killpg(0, signal.SIGKILL)\n",
    "import builtins\nbuiltins.__import__ = None\n",
    "open('/etc/passwd', 'a').write('x')\n",
]


def candidate(client: int, number: int) -> tuple[dict[str, Any], str]:
    """The candidate and the status class it must get: passed, failed, timeout or hostile."""
    tag = f"# client {client} candidate {number}\n"
    kind = (client * PER_CLIENT + number) % 50
    limits = {"wall_s": 0.5} if kind >= 47 else {}  # only fork bombs and loops wait out a (short) limit
    if kind < 25:
        code, expect = f"def add(a, b):\n    return a + b + {kind} - {kind}\n", "passed"
    elif kind < 40:
        code, expect = f"def add(a, b):\n    return a * b + {kind}\n", "failed"
    elif kind < 47:
        code, expect = HOSTILE[kind - 40] + "def add(a, b):\n    return a - b\n", "hostile"  # wrong if it runs
    elif kind == 47:
        code, expect = (
            "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
            "hostile",
        )
    else:
        code, expect = "while True:\n    pass\n", "timeout"
    return {"code": tag + code, "tests": TESTS, **({"limits": limits} if limits else {})}, expect


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.slow
def test_two_thousand_candidates_from_eight_clients(tmp_path: Path) -> None:
    env = {"VERILOOP_SANDBOX__WARM_WORKERS": "2", "VERILOOP_JUDGE__SYNC_MAX": "25"}
    with served("--backend", "scripted", home=tmp_path, serve_args=["--workers", "0"], env=env) as server:

        def warm_up(client: int) -> None:  # the same concurrency as the test: threads, pools and arenas exist
            with JudgeClient(server.url, token=f"warm-{client}") as warm:
                warm.judge([candidate(client, n)[0] for n in range(BATCH)])

        warmers = [threading.Thread(target=warm_up, args=(client,)) for client in range(CLIENTS)]
        for thread in warmers:
            thread.start()
        for thread in warmers:
            thread.join(timeout=300)
        start_kb = rss_kb(server.process.pid)
        answers: dict[tuple[int, int], dict[str, Any]] = {}
        failures: list[str] = []
        lock = threading.Lock()

        def run(client: int) -> None:
            try:
                with JudgeClient(server.url, token=f"client-{client}", retries=8) as judge:
                    for first in range(0, PER_CLIENT, BATCH):
                        batch = [candidate(client, n)[0] for n in range(first, first + BATCH)]
                        mode = "job" if client == 0 else "sync"  # one client goes through jobs
                        verdicts = judge.judge(batch, mode=mode)
                        if [v["index"] for v in verdicts] != list(range(len(batch))):
                            raise AssertionError(f"client {client}: indices {[v['index'] for v in verdicts]}")
                        with lock:
                            for offset, verdict in enumerate(verdicts):
                                key = (client, first + offset)
                                if key in answers:
                                    raise AssertionError(f"duplicate verdict for {key}")
                                answers[key] = verdict
            except Exception as exc:  # reported below, with every other client's
                with lock:
                    failures.append(f"client {client}: {type(exc).__name__}: {exc}")

        threads = [threading.Thread(target=run, args=(client,)) for client in range(CLIENTS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=600)
        assert not any(thread.is_alive() for thread in threads), "a client hung"
        assert not failures, failures
        end_kb = rss_kb(server.process.pid)
    assert len(answers) == CLIENTS * PER_CLIENT
    wrong = []
    for (client, number), verdict in answers.items():
        _, expect = candidate(client, number)
        status = verdict["status"]
        ok = status == expect if expect in ("passed", "failed", "timeout") else status not in ("passed", "infra_error")
        if not ok:
            wrong.append((client, number, expect, status, verdict.get("error")))
    assert not wrong, wrong[:10]
    print(f"server RSS after warm-up {start_kb} kB, after the load {end_kb} kB")
    assert abs(end_kb - start_kb) <= 0.1 * start_kb, f"server memory {start_kb} kB -> {end_kb} kB: not within 10%"
