"""A stand-in for llama.cpp's `llama-server` (the argument names and /health, /props and /completion answers the
peer bench reads), so the peer code is tested without building llama.cpp: each completion answers `n_predict`
tokens (ids 1000 + i), or stops early as if on a stop word when the prompt's first id is odd."""

from __future__ import annotations

import argparse
import json
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SECONDS_PER_TOKEN = 0.001


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
    args, _ = parser.parse_known_args()
    if args.version:
        print("version: 0 (fake)\nbuilt with python")
        return
    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.slots = args.np  # type: ignore[attr-defined]
    server.serve_forever()


if __name__ == "__main__":
    main()
