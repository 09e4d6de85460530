"""Sample ids as object-key segments: a reversible mapping, refused when two samples would meet.

Episode ids and every segment of a run-record key are `[A-Za-z0-9._=+@-]`, 1-255 characters,
starting with a letter or digit, without `..` (spoteval.record.check_id). Harness sample ids are not:
inspect's default ids are integers, and datasets use `/`, spaces and any Unicode. `sample_key`
maps an id to a key segment and `sample_id` maps it back:

- an integer `7` becomes `7`; a string keeps its letters, digits and `.`, `_`, `+`, `@`, `-`;
- every other byte of its UTF-8 form becomes `=XX` (two upper-case hex digits), and so does `=`
  itself and a `.` that follows a `.`: `"a/b c"` -> `a=2Fb=20c`, `"x=1"` -> `x=3D1`;
- an id that does not start with an ASCII letter or digit gets the prefix `0==` (which no other
  key has: `=` is always followed by two hex digits) and its first character escaped:
  `"_x"` -> `0===5Fx`;
- the string `"7"` would also become `7`: `sample_keys` refuses a list in which two ids map to the
  same key (one line naming both), so samples are never silently merged.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Final

from spoteval.record import RecordError, check_id

SampleId = int | str

_PLAIN: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._+@-")
_ESCAPE: Final = re.compile(r"=([0-9A-F]{2})")
MAX_KEY: Final = 255
_LEADING: Final = "0=="


class SampleIdError(ValueError):
    """A sample id that cannot be a key, or two ids that map to one key (one line)."""


def sample_key(sample: SampleId) -> str:
    """The key segment of one sample id (see the module's docstring)."""
    if isinstance(sample, bool) or not isinstance(sample, int | str):
        raise SampleIdError(f"sample id {sample!r} must be a string or an integer")
    if isinstance(sample, int):
        if sample < 0:
            raise SampleIdError(f"sample id {sample} must not be negative")
        return str(sample)
    if not sample:
        raise SampleIdError("sample id '' is empty")
    out: list[str] = []
    previous = ""
    for ch in sample:
        plain = ch in _PLAIN and not (ch == "." and previous == ".")
        if not out and not (ch.isascii() and ch.isalnum()):
            out.append(_LEADING)
            plain = False
        out.append(ch if plain else "".join(f"={b:02X}" for b in ch.encode()))
        previous = ch
    key = "".join(out)
    if len(key) > MAX_KEY:
        raise SampleIdError(f"sample id {sample[:40]!r}... is too long: {len(key)} > {MAX_KEY} as a key")
    try:
        return check_id(key, "sample key")
    except RecordError as exc:  # pragma: no cover - the escaping above makes every key valid
        raise SampleIdError(str(exc)) from None


def sample_id(key: str, *, integer: bool = False) -> SampleId:
    """The sample id a key stands for (`integer` for harnesses whose ids are integers)."""
    if integer:
        if not key.isdigit():
            raise SampleIdError(f"sample key {key!r} is not an integer id")
        return int(key)
    return decode_key(key)


def decode_key(key: str) -> str:
    """A string id back from its key: `=XX` escapes are bytes of the id's UTF-8 form."""
    data = bytearray()
    i = len(_LEADING) if key.startswith(_LEADING) else 0
    while i < len(key):
        if key[i] == "=":
            m = _ESCAPE.match(key, i)
            if m is None:
                raise SampleIdError(f"sample key {key!r} has a bad escape at {i}")
            data.append(int(m.group(1), 16))
            i += 3
        else:
            data.extend(key[i].encode())
            i += 1
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise SampleIdError(f"sample key {key!r} is not UTF-8 once decoded") from None


def sample_keys(samples: Iterable[SampleId]) -> list[str]:
    """The keys of a list of ids, in order; one line naming the first two ids that would meet."""
    keys: list[str] = []
    seen: dict[str, SampleId] = {}
    for sample in samples:
        key = sample_key(sample)
        if key in seen:
            other = seen[key]
            if other == sample and type(other) is type(sample):
                raise SampleIdError(f"sample id {sample!r} appears twice")
            raise SampleIdError(
                f"sample ids {other!r} and {sample!r} map to the same key {key!r}: rename one of them"
            )
        seen[key] = sample
        keys.append(key)
    return keys


def parse_samples(values: Sequence[object]) -> list[SampleId]:
    """Sample ids from JSON (a manifest entry's `samples`): strings and non-negative integers."""
    out: list[SampleId] = []
    for value in values:
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise SampleIdError(f"sample id {value!r} must be a string or an integer")
        out.append(value)
    sample_keys(out)
    return out
