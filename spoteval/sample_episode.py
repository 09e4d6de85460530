"""A sample episode command for tests and drills (standard library only, Python >= 3.10).

    python -m spoteval.sample_episode --episode-id e1 --model-url http://127.0.0.1:8000 \\
        --output /tmp/e1.json [--seconds 0.1] [--max-seconds 0.3] [--fail-rate 0.1] [--seed 0]

It asks the model server's `/v1/completions` for an answer to a prompt built from the episode id,
takes `--seconds` in all (or a duration between `--seconds` and `--max-seconds`, fixed per episode
id and seed), and writes its JSON result to `--output` (atomically: a killed episode leaves no
partial file). Failures are deterministic per episode id and seed: an episode "fails" when the
hash of (seed, episode id) falls below `--fail-rate`, on every attempt.

`--trace FILE` appends `start ID PID ATTEMPT` when the episode starts and `end ID PID CODE ATTEMPT`
just before it exits by itself (a killed episode leaves no `end` line), where ATTEMPT is the name of
the `--output` file without its folder and `.json` (the agent names it `{episode}.{incarnation}.
{dispatch}`): tests and drills count killed attempts and match each line to a recorded attempt.

Exit codes: 0 success; 1 the episode failed (injected failure or model server error); 2 bad arguments.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence

from spoteval.cli import OneLineParser


def unit_hash(seed: int, episode_id: str, salt: str) -> float:
    """A number in [0, 1) fixed by (seed, episode id, salt)."""
    digest = hashlib.sha256(f"{seed}:{salt}:{episode_id}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def will_fail(episode_id: str, fail_rate: float, seed: int = 0) -> bool:
    """Whether this episode fails under --fail-rate/--seed (tests use it to predict outcomes)."""
    return unit_hash(seed, episode_id, "fail") < fail_rate


def duration(episode_id: str, seconds: float, max_seconds: float | None, seed: int = 0) -> float:
    if max_seconds is None or max_seconds <= seconds:
        return seconds
    return seconds + (max_seconds - seconds) * unit_hash(seed, episode_id, "duration")


def ask(model_url: str, prompt: str, timeout: float) -> str:
    body = json.dumps({"model": "standin", "prompt": prompt, "max_tokens": 8}).encode()
    req = urllib.request.Request(
        model_url.rstrip("/") + "/v1/completions",
        data=body,
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        answer = json.loads(resp.read())
    return str(answer["choices"][0]["text"])


def main(argv: Sequence[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m spoteval.sample_episode")
    parser.add_argument("--episode-id", required=True)
    parser.add_argument("--model-url", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--seconds", type=float, default=0.0)
    parser.add_argument("--max-seconds", type=float, default=None)
    parser.add_argument("--fail-rate", type=float, default=0.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trace", default=None, help="append start/end lines to this file")
    args = parser.parse_args(argv)
    stem = os.path.basename(args.output).removesuffix(".json")
    trace(args.trace, f"start {args.episode_id} {os.getpid()} {stem}")
    code = run(args)
    trace(args.trace, f"end {args.episode_id} {os.getpid()} {code} {stem}")
    return code


def trace(path: str | None, line: str) -> None:
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (line + "\n").encode())
        finally:
            os.close(fd)


def run(args: argparse.Namespace) -> int:
    if args.seconds < 0 or not 0.0 <= args.fail_rate <= 1.0:
        print("sample_episode: --seconds must be >= 0 and --fail-rate in [0, 1]", file=sys.stderr)
        return 2
    started = time.monotonic()
    total = duration(args.episode_id, args.seconds, args.max_seconds, args.seed)
    prompt = f"Episode {args.episode_id}: answer briefly."
    try:
        text = ask(args.model_url, prompt, timeout=max(5.0, total))
    except (OSError, ValueError, KeyError, IndexError) as exc:
        print(f"sample_episode: model server at {args.model_url} failed: {exc}", file=sys.stderr)
        return 1
    rest = total - (time.monotonic() - started)
    if rest > 0:
        time.sleep(rest)
    if will_fail(args.episode_id, args.fail_rate, args.seed):
        print(f"sample_episode: episode {args.episode_id} failed (injected)", file=sys.stderr)
        return 1
    result = {
        "episode_id": args.episode_id,
        "prompt": prompt,
        "answer": text,
        "score": unit_hash(args.seed, args.episode_id, "score"),
        "seconds": round(time.monotonic() - started, 4),
    }
    tmp = f"{args.output}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(result, f, sort_keys=True)
    os.replace(tmp, args.output)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
