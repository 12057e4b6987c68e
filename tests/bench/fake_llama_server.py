"""A stand-in for llama.cpp's `llama-server` (its arguments, /health, /props and /completion), so the code that drives
one is tested without building llama.cpp.

`--mode peer` (the default) answers what the peer bench reads: `n_predict` tokens (ids 1000 + i), or an early stop as
if on a stop word when the prompt's first id is odd, and it asserts the bench's greedy, uncached requests.

`--mode backend` answers what the llama_cpp backend reads: the prompt's ids echoed as the generated tokens (so a test
chooses the answer by its prompt), then EOS (id 2) when they fit in `n_predict`; a stop string (ids as code points)
ends the answer after its tokens, as llama-server's `tokens` do; `n_probs` adds `completion_probabilities`; a
prompt starting with id 33 (`!`) kills the server before it answers. `--record FILE` appends each request body as one
JSON line."""

from __future__ import annotations

import argparse
import json
import os
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SECONDS_PER_TOKEN = 0.001
EOS = 2
CRASH = 33


class Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200, {"status": "ok"})
        elif self.path == "/props":
            self._send(200, {"total_slots": self.server.slots, "build_info": "fake"})  # type: ignore[attr-defined]
        else:
            self._send(404, {"error": "not found"})

    def do_POST(self) -> None:
        if self.path != "/completion":
            self._send(404, {"error": "not found"})
            return
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.server.record:  # type: ignore[attr-defined]
            with open(self.server.record, "a") as out:  # type: ignore[attr-defined]
                out.write(json.dumps(body) + "\n")
        if self.server.mode == "backend":  # type: ignore[attr-defined]
            self._send(200, backend_answer(body))
            return
        assert body["temperature"] == 0.0 and body["cache_prompt"] is False and not body["stream"]
        prompt, limit = body["prompt"], int(body["n_predict"])
        stopped = bool(prompt) and prompt[0] % 2 == 1 and limit > 2
        count = limit // 2 if stopped else limit
        time.sleep(SECONDS_PER_TOKEN * count)
        self._send(
            200,
            {
                "content": "x" * count,
                "tokens": [1000 + index for index in range(count)],
                "tokens_predicted": count,
                "tokens_evaluated": len(prompt),
                "stop_type": "word" if stopped else "limit",
                "timings": {
                    "prompt_n": len(prompt),
                    "prompt_per_second": 1000.0,
                    "predicted_n": count,
                    "predicted_per_second": 1 / SECONDS_PER_TOKEN,
                },
            },
        )


def backend_answer(body: dict[str, Any]) -> dict[str, Any]:
    """The prompt echoed: cut at `n_predict` ("limit"), after a stop string ("word"), or ended by EOS ("eos")."""
    prompt, limit = [int(token) for token in body["prompt"]], int(body["n_predict"])
    if prompt and prompt[0] == CRASH:
        os._exit(3)
    tokens, stop_type = prompt[:limit], "limit"
    text = "".join(chr(token) for token in tokens)
    hits = [(index, word) for word in body.get("stop", []) if (index := text.find(word)) >= 0]
    if hits:
        index, word = min(hits)
        tokens, stop_type = tokens[: index + len(word)], "word"
    elif len(prompt) < limit:
        tokens, stop_type = [*prompt, EOS], "eos"
    answer: dict[str, Any] = {
        "content": "".join(chr(token) for token in tokens if token != EOS),
        "tokens": tokens,
        "tokens_predicted": len(tokens),
        "tokens_evaluated": len(prompt),
        "stop_type": stop_type,
    }
    if body.get("n_probs"):
        answer["completion_probabilities"] = [
            {"id": token, "token": chr(token), "logprob": -0.25 * (index + 1), "top_logprobs": []}
            for index, token in enumerate(tokens)
        ]
    return answer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-m", default="")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("-np", type=int, default=1)
    parser.add_argument("-c", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--threads-batch", type=int, default=1)
    parser.add_argument("--version", action="store_true")
    parser.add_argument("--mode", choices=["peer", "backend"], default="peer")
    parser.add_argument("--record", default="")
    args, _ = parser.parse_known_args()
    if args.version:
        print("version: 0 (fake)\nbuilt with python")
        return
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.slots = args.np  # type: ignore[attr-defined]
    server.mode, server.record = args.mode, args.record  # type: ignore[attr-defined]
    server.serve_forever()


if __name__ == "__main__":
    main()
