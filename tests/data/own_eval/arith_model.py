"""A user's test model: an OpenAI-compatible server with known answers (standard library only).

    python arith_model.py --port PORT

"What is A + B?" is answered with A + B, or A + B + 1 when the sum is a multiple of 3. Every answer
appends `PID<TAB>QUESTION` to asked.log in the working folder. On start it prints one line with its
pid (`arith_model: serving on 127.0.0.1:PORT, pid PID`), so its log says which server was whose.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

QUESTION = re.compile(r"What is (\d+) \+ (\d+)\?")
LOCK = threading.Lock()


def answer(prompt: str) -> tuple[str, str]:
    found = QUESTION.findall(prompt)
    if not found:
        return "", "I do not know"
    a, b = (int(x) for x in found[-1])
    total = a + b
    return f"What is {a} + {b}?", str(total + 1 if total % 3 == 0 else total)


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def _send(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200, {"status": "ok"})
        else:
            self._send(200, {"object": "list", "data": [{"id": "standin", "object": "model"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if "messages" in body:
            prompt = "\n".join(str(m.get("content")) for m in body["messages"])
        else:
            prompt = body.get("prompt", "")
            prompt = prompt[0] if isinstance(prompt, list) else prompt
        question, text = answer(str(prompt))
        if question:
            with LOCK, open("asked.log", "a") as log:
                log.write(f"{os.getpid()}\t{question}\n")
        usage = {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
        if "messages" in body:
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": f"The answer is {text}"},
                "finish_reason": "stop",
            }
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "finish_reason": "stop", "logprobs": None}
            obj = "text_completion"
        self._send(
            200,
            {
                "id": "x",
                "object": obj,
                "created": int(time.time()),
                "model": "standin",
                "choices": [choice],
                "usage": usage,
            },
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print(f"arith_model: serving on 127.0.0.1:{args.port}, pid {os.getpid()}", flush=True)
    server.serve_forever(poll_interval=0.05)


if __name__ == "__main__":
    main()
