"""The one typed reader for YAML/JSON input: every error names the key path.

Stack settings, the agent's config, a workload, a grant and a stack's outputs are all mappings read
key by key into frozen dataclasses. `Reader` is that reading: it wraps one mapping at a dotted key
path (`workload.restart`), and each typed method reads one key or raises the caller's error with the
full path (`workload.restart.boot_minutes: must be >= 0, got -1`). Nested mappings are read with
`section`, which extends the path. Unknown keys are refused, either up front (`known=`) or after the
reading (`done()`), so a misspelt key never silently falls back to a default.

Callers choose their error type with `error=` (any `(key, problem) -> Exception`), and a kit whose
published wording differs (the agent's `missing key X`, the placement's `must be a whole number`)
subclasses `Reader` and overrides the class attributes below or `missing()`.

`read_document(path)` reads a JSON or YAML file into plain Python values; `DocumentError` says why it
could not, in parts the caller words as it always has. Standard library only (YAML is imported when a
YAML file is read), so the node agent can use it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, NoReturn

#: Builds the exception for a problem at a key path.
ErrorFactory = Callable[[str, str], Exception]


class ReadError(ValueError):
    """Bad input at a key path: `str()` is `key: problem`."""

    def __init__(self, key: str, problem: str) -> None:
        super().__init__(f"{key}: {problem}")
        self.key = key
        self.problem = problem


def key_path(where: str, key: str) -> str:
    """`where.key`, or `key` at the top (`where` empty)."""
    return f"{where}.{key}" if where else key


def is_number(value: object) -> bool:
    """A finite int or float that is not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(float(value))


class Reader:
    """One mapping being read at the key path `where`. Each read marks its key as seen."""

    #: The problems, worded; a kit with its own published wording overrides these.
    MISSING: ClassVar[str] = "missing (required)"
    NOT_MAPPING: ClassVar[str] = "must be a mapping, got {type}"
    NOT_STRING: ClassVar[str] = "must be a non-empty string, got {value!r}"
    NOT_NUMBER: ClassVar[str] = "must be a number, got {value!r}"
    NOT_POSITIVE: ClassVar[str] = "must be > 0, got {value!r}"
    BELOW: ClassVar[str] = "must be >= {minimum:g}, got {value!r}"
    NOT_INTEGER: ClassVar[str] = "must be an integer, got {value!r}"
    INTEGER_BELOW: ClassVar[str] = "must be >= {minimum}, got {value!r}"
    UNKNOWN: ClassVar[str] = "unknown key (known: {known})"

    def __init__(
        self,
        raw: object,
        where: str = "",
        *,
        error: ErrorFactory = ReadError,
        known: Iterable[str] | None = None,
        label: str = "input",
    ) -> None:
        """`label` names the mapping in an error when `where` is empty (the top of a document)."""
        self.where = where
        self.error = error
        if not isinstance(raw, Mapping):
            self.fail_at(where or label, self.NOT_MAPPING.format(type=type(raw).__name__))
        self.raw: Mapping[Any, Any] = raw
        self.seen: set[str] = set()
        if known is not None:
            self.reject_unknown(known)

    # --- the mapping itself ---------------------------------------------------------------------

    def path(self, key: str) -> str:
        return key_path(self.where, key)

    def fail_at(self, path: str, problem: str) -> NoReturn:
        raise self.error(path, problem)

    def fail(self, key: str, problem: str) -> NoReturn:
        """Raise the caller's error for `problem` at this mapping's `key`."""
        self.fail_at(self.path(key), problem)

    def missing(self, key: str) -> NoReturn:
        self.fail(key, self.MISSING)

    def has(self, key: str) -> bool:
        """The key is present with a value (a YAML/JSON null counts as absent)."""
        return self.raw.get(key) is not None

    def value(self, key: str) -> Any:
        """The raw value, None when absent."""
        self.seen.add(key)
        return self.raw.get(key)

    def require(self, key: str) -> Any:
        """The raw value; absent is an error."""
        value = self.value(key)
        if value is None:
            self.missing(key)
        return value

    def reject_unknown(self, known: Iterable[str]) -> None:
        """Refuse the first key (sorted) that is not in `known`."""
        names = frozenset(known)
        unknown = sorted(str(k) for k in self.raw if k not in names)
        if unknown:
            self.fail(unknown[0], self.UNKNOWN.format(known=", ".join(sorted(names))))

    def done(self) -> None:
        """Refuse any key no read has asked for (for readers that consume keys as they go)."""
        self.reject_unknown(self.seen)

    # --- nested mappings ------------------------------------------------------------------------

    def section(self, key: str, known: Iterable[str] | None = None) -> Reader:
        """The nested mapping at `key` (required), read with the same error and wording."""
        return type(self)(self.require(key), self.path(key), error=self.error, known=known)

    def opt_section(self, key: str, known: Iterable[str] | None = None) -> Reader | None:
        value = self.value(key)
        if value is None:
            return None
        return type(self)(value, self.path(key), error=self.error, known=known)

    # --- scalars ---------------------------------------------------------------------------------

    def string(self, key: str, default: str | None = None) -> str:
        """A non-blank string; absent gives `default`, or is an error without one."""
        value = self.value(key)
        if value is None:
            if default is None:
                self.missing(key)
            return default
        if not isinstance(value, str) or not value.strip():
            self.fail(key, self.NOT_STRING.format(value=value))
        return value

    def opt_string(self, key: str) -> str | None:
        if not self.has(key):
            self.seen.add(key)
            return None
        return self.string(key)

    def choice(self, key: str, choices: Sequence[str], default: str | None = None) -> str:
        value = self.string(key, default)
        if value not in choices:
            self.fail(key, f"must be one of {', '.join(choices)}, got {value!r}")
        return value

    def number(
        self, key: str, default: float | None = None, *, minimum: float = 0.0, positive: bool = False
    ) -> float:
        """A finite number >= `minimum` (> 0 when `positive`); absent gives `default` or is an error."""
        found = self.opt_number(key, minimum=minimum, positive=positive)
        if found is not None:
            return found
        if default is None:
            self.missing(key)
        return default

    def opt_number(self, key: str, *, minimum: float = 0.0, positive: bool = False) -> float | None:
        value = self.value(key)
        if value is None:
            return None
        if not is_number(value):
            self.fail(key, self.NOT_NUMBER.format(value=value))
        if positive and value <= 0:
            self.fail(key, self.NOT_POSITIVE.format(value=value))
        if value < minimum:
            self.fail(key, self.BELOW.format(minimum=minimum, value=value))
        return float(value)

    def integer(
        self,
        key: str,
        default: int | None = None,
        *,
        minimum: int = 1,
        positive: bool = False,
        whole_floats: bool = False,
    ) -> int:
        """An int >= `minimum` (> 0 when `positive`); `whole_floats` also takes 3.0 as 3."""
        value = self.value(key)
        if value is None:
            if default is None:
                self.missing(key)
            return default
        if whole_floats and isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(key, self.NOT_INTEGER.format(value=value, minimum=minimum))
        if positive and value <= 0:
            self.fail(key, self.NOT_POSITIVE.format(value=value))
        if value < minimum:
            self.fail(key, self.INTEGER_BELOW.format(value=value, minimum=minimum))
        return value

    def boolean(self, key: str, default: bool) -> bool:
        value = self.value(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            self.fail(key, f"must be true or false, got {value!r}")
        return value

    # --- lists and maps of strings ------------------------------------------------------------

    def argv(self, key: str, *, required: bool = True) -> tuple[str, ...]:
        """A command: a non-empty list of non-empty strings; absent is () unless `required`."""
        value = self.require(key) if required else self.value(key)
        if value is None:
            return ()
        if (
            not isinstance(value, list | tuple)
            or not value
            or not all(isinstance(v, str) and v for v in value)
        ):
            self.fail(key, f"must be a non-empty list of strings (argv), got {value!r}")
        return tuple(value)

    def strings(self, key: str, *, what: str = "strings", single: bool = False) -> tuple[str, ...]:
        """A list of non-empty strings, () when absent; `single` also takes one bare string."""
        value = self.value(key)
        if value is None:
            return ()
        if single and isinstance(value, str):
            value = [value]
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) and v for v in value):
            self.fail(key, f"must be a list of {what}, got {value!r}")
        return tuple(value)

    def string_map(self, key: str) -> dict[str, str]:
        """A mapping of non-empty string keys to strings, {} when absent."""
        value = self.value(key)
        if value is None:
            return {}
        if not isinstance(value, Mapping) or not all(
            isinstance(k, str) and k and isinstance(v, str) for k, v in value.items()
        ):
            self.fail(key, f"must be a mapping of strings, got {value!r}")
        return dict(value)


# --- documents -------------------------------------------------------------------------------------


class DocumentError(Exception):
    """A file that could not be read as JSON or YAML.

    `reason` is "missing", "unreadable", "malformed", "empty" (nothing but blanks or comments) or
    "not-mapping" (`read_mapping`: a list or a scalar at the top); `detail` the OS error text or the parser's
    problem; `text` the whole message of the error underneath; `line`/`column` (1-based) where the
    parser stopped, when it says; `first_line` the first line of the parser's own message. Callers
    word the error for their users from these parts.
    """

    def __init__(
        self,
        path: Path,
        reason: str,
        detail: str,
        *,
        line: int | None = None,
        column: int | None = None,
        first_line: str = "",
        text: str = "",
    ) -> None:
        super().__init__(f"{path}: {reason}: {detail}")
        self.path = path
        self.reason = reason
        self.detail = detail
        self.line = line
        self.column = column
        self.first_line = first_line or detail
        self.text = text or detail

    @property
    def at(self) -> str:
        """` at line L column C`, or "" when the parser gave no position."""
        return "" if self.line is None else f" at line {self.line} column {self.column}"


def read_text(path: Path) -> str:
    """The file's UTF-8 text; a missing or unreadable file is a `DocumentError`."""
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise DocumentError(path, "missing", exc.strerror or str(exc), text=str(exc)) from None
    except (OSError, UnicodeDecodeError) as exc:
        detail = (exc.strerror if isinstance(exc, OSError) else None) or str(exc)
        raise DocumentError(path, "unreadable", detail, text=str(exc)) from None


def parse_yaml(path: Path, text: str) -> object:
    """YAML text (JSON is YAML too) into plain values; malformed text is a `DocumentError`."""
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or "cannot parse"
        raise DocumentError(
            path,
            "malformed",
            problem,
            line=None if mark is None else mark.line + 1,
            column=None if mark is None else mark.column + 1,
            first_line=str(exc).splitlines()[0] if str(exc) else problem,
        ) from None


def _json(path: Path, text: str) -> object:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DocumentError(path, "malformed", exc.msg, line=exc.lineno, column=exc.colno) from None


def read_json_document(path: Path) -> object:
    """The JSON file at `path`; malformed JSON is a `DocumentError` with its line and column."""
    return _json(path, read_text(path))


def read_document(path: Path, *, json_first: bool = False) -> object:
    """The JSON or YAML file at `path` as plain values.

    With `json_first`, text that is valid JSON is read as JSON (YAML 1.1 reads a JSON number like
    1e-05 as a string), anything else as YAML.
    """
    text = read_text(path)
    if json_first:
        try:
            return json.loads(text)
        except ValueError:
            pass
    return parse_yaml(path, text)


def read_mapping(path: Path, *, json_first: bool = False) -> Mapping[str, Any]:
    """A JSON or YAML file whose top is a mapping of keys; an empty file (`empty`) or another top
    (`not-mapping`, with the type's name as `detail`) is a `DocumentError`, as is a bad file."""
    doc = read_document(path, json_first=json_first)
    if doc is None:
        raise DocumentError(path, "empty", "nothing but blanks or comments", line=1, column=1)
    if not isinstance(doc, Mapping):
        kind = {"list": "a list", "str": "a string"}.get(type(doc).__name__, type(doc).__name__)
        raise DocumentError(path, "not-mapping", kind, line=1, column=1)
    return doc


def describe(err: DocumentError, what: str) -> str:
    """The one line every command prints for a file it could not use: the file, what is wrong with
    it and, for a malformed file, the line and column where the parser stopped.

        work.yaml: malformed YAML at line 3 column 7: mapping values are not allowed here
        work.yaml: the workload file is empty (it must be a mapping of keys)
    """
    if err.reason == "missing":
        return f"{err.path}: {what} not found"
    if err.reason == "unreadable":
        return f"{err.path}: cannot read the {what}: {err.detail}"
    if err.reason == "empty":
        return f"{err.path}: the {what} is empty (it must be a mapping of keys)"
    if err.reason == "not-mapping":
        return f"{err.path}: the {what} must be a mapping of keys, not {err.detail}"
    kind = "JSON" if err.path.suffix == ".json" else "YAML"
    return f"{err.path}: malformed {kind}{err.at}: {err.detail}"
