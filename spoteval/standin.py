"""A small OpenAI-compatible stand-in model server for tests and drills (standard library only).

    python -m spoteval.standin --port 8000 [--host 127.0.0.1] [--model standin] [--startup-delay 5]

Endpoints:

- `GET /health`: 200 `{"status": "ok"}` once serving; 503 `{"status": "starting"}` during the
  start-up delay (it stands in for a model server loading its weights).
- `GET /v1/models`: the one model it serves.
- `POST /v1/completions` and `POST /v1/chat/completions`: deterministic answers: the same prompt
  (or the same messages) always gives the same text, derived from a hash of the input.

`--port 0` picks a free port. The first line on stdout is `standin serving on http://HOST:PORT`
(printed once the socket listens, before the start-up delay ends). SIGTERM and SIGINT end it with
exit code 0. Runs on Python >= 3.10.
"""

from __future__ import annotations

import hashlib
import json
import signal
import sys
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final

from spoteval.cli import OneLineParser

DEFAULT_MODEL: Final = "standin"
_WORDS: Final = (
    "alpha",
    "bravo",
    "charlie",
    "delta",
    "echo",
    "foxtrot",
    "golf",
    "hotel",
    "india",
    "juliett",
    "kilo",
    "lima",
    "mike",
    "november",
    "oscar",
    "papa",
)


def answer_text(prompt: str, max_tokens: int = 16) -> str:
    """The deterministic answer to a prompt: words chosen by the prompt's SHA-256."""
    digest = hashlib.sha256(prompt.encode()).digest()
    n = max(1, min(max_tokens, 16))
    return " ".join(_WORDS[b % len(_WORDS)] for b in digest[:n])


def _usage(prompt: str, text: str) -> dict[str, int]:
    p, c = len(prompt.split()), len(text.split())
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


class StandinServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], model: str, startup_delay_s: float) -> None:
        super().__init__(address, _Handler)
        self.model = model
        self.ready_at = time.monotonic() + max(0.0, startup_delay_s)

    @property
    def ready(self) -> bool:
        return time.monotonic() >= self.ready_at

    @property
    def base_url(self) -> str:
        host, port = self.server_address[0], self.server_address[1]
        return f"http://{host!s}:{port}"


class _Handler(BaseHTTPRequestHandler):
    server: StandinServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        self._send(status, {"error": {"message": message, "type": kind, "code": status}})

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/health":
            if self.server.ready:
                self._send(200, {"status": "ok"})
            else:
                self._send(503, {"status": "starting"})
        elif path == "/v1/models":
            if not self.server.ready:
                self._error(503, "model is loading", "server_error")
                return
            model = {"id": self.server.model, "object": "model", "created": 0, "owned_by": "spot-eval"}
            self._send(200, {"object": "list", "data": [model]})
        else:
            self._error(404, f"no route GET {path}")

    def _read_json(self) -> dict[str, Any] | None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length > 0 else b""
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            self._error(400, "request body is not JSON")
            return None
        if not isinstance(body, dict):
            self._error(400, "request body must be a JSON object")
            return None
        return body

    def do_POST(self) -> None:
        path = self.path.split("?", 1)[0]
        if path not in ("/v1/completions", "/v1/chat/completions"):
            self._read_json()
            self._error(404, f"no route POST {path}")
            return
        body = self._read_json()
        if body is None:
            return
        if not self.server.ready:
            self._error(503, "model is loading", "server_error")
            return
        if body.get("stream"):
            self._error(400, "stream is not supported by the stand-in server")
            return
        max_tokens = body.get("max_tokens", 16)
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
            self._error(400, "max_tokens must be a positive integer")
            return
        model = body.get("model") or self.server.model
        if path == "/v1/completions":
            prompt = body.get("prompt")
            if isinstance(prompt, list) and all(isinstance(p, str) for p in prompt):
                prompts = list(prompt)
            elif isinstance(prompt, str):
                prompts = [prompt]
            else:
                self._error(400, "prompt must be a string or a list of strings")
                return
            texts = [answer_text(p, max_tokens) for p in prompts]
            choices = [
                {"index": i, "text": t, "logprobs": None, "finish_reason": "stop"}
                for i, t in enumerate(texts)
            ]
            joined = "\n".join(prompts)
            self._send(
                200,
                {
                    "id": "cmpl-" + hashlib.sha256(joined.encode()).hexdigest()[:24],
                    "object": "text_completion",
                    "created": int(time.time()),
                    "model": model,
                    "choices": choices,
                    "usage": _usage(joined, " ".join(texts)),
                },
            )
            return
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            self._error(400, "messages must be a non-empty list of objects")
            return
        prompt = "\n".join(f"{m.get('role', '')}: {m.get('content', '')}" for m in messages)
        text = answer_text(prompt, max_tokens)
        self._send(
            200,
            {
                "id": "chatcmpl-" + hashlib.sha256(prompt.encode()).hexdigest()[:24],
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                ],
                "usage": _usage(prompt, text),
            },
        )


def serve(host: str, port: int, model: str = DEFAULT_MODEL, startup_delay_s: float = 0.0) -> StandinServer:
    """Bind the server (port 0 = a free one); the caller runs `serve_forever()` and `shutdown()`."""
    return StandinServer((host, port), model, startup_delay_s)


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m spoteval.standin", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument(
        "--startup-delay", type=float, default=0.0, metavar="S", help="answer 503 for S seconds first"
    )
    args = parser.parse_args(argv)
    if args.startup_delay < 0 or not 0 <= args.port <= 65535:
        print("standin: --startup-delay must be >= 0 and --port in 0..65535", file=sys.stderr)
        return 2
    try:
        server = serve(args.host, args.port, args.model, args.startup_delay)
    except OSError as exc:
        print(f"standin: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 2

    def stop(signum: int, frame: object) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    print(f"standin serving on {server.base_url}", flush=True)
    try:
        server.serve_forever(poll_interval=0.1)
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
