"""The node agent runs with the standard library and obstore alone (a node installs nothing else):
every module it imports, at load time or when a function runs, is the standard library's,
obstore's or the project's own, and the agent bundle (the whole `spoteval` package) holds each of
the project's modules it reaches."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

from spoteval.bundle.build import source_files

ROOT = Path(__file__).resolve().parents[1]
ALLOWED = frozenset({"obstore"})
#: (module, what it imports when one of its functions runs) that the node never runs: the YAML
#: reader of the command lines' documents (the agent's config is JSON, read by `Reader`)
NOT_ON_THE_NODE = frozenset({("spoteval.config_reader", "yaml")})
#: the agent's entries: the CLI (`python -m spoteval.agent`), the module it runs for `on_done:
#: api_stop` and every module of the package, the ones its loop loads when a run needs them too
AGENT = ROOT / "spoteval" / "agent"


def _module_of(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
    return ".".join(parts)


def _file_of(module: str) -> Path | None:
    base = ROOT.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imports(path: Path, module: str) -> set[str]:
    """Every module named by an import in the file, wherever the import stands (a function's too)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                up = parts[: len(parts) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _closure() -> tuple[set[str], set[str]]:
    """(the project's modules the agent reaches, the outside modules they import)."""
    todo = [_module_of(p) for p in sorted(AGENT.rglob("*.py"))]
    seen: set[str] = set()
    outside: set[str] = set()
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        path = _file_of(module)
        assert path is not None, module
        for name in _imports(path, module):
            top = name.split(".")[0]
            if top == "spoteval":
                parts = name.split(".")
                todo.extend(m for i in range(1, len(parts) + 1) if _file_of(m := ".".join(parts[:i])))
            elif (module, top) not in NOT_ON_THE_NODE:
                outside.add(top)
    return seen, outside


def test_every_import_the_agent_can_reach_is_the_standard_library_or_obstore() -> None:
    modules, outside = _closure()
    assert {"spoteval.apis", "spoteval.apis.http", "spoteval.apis.runpod"} <= modules
    foreign = sorted(m for m in outside - ALLOWED if m not in sys.stdlib_module_names and m != "__future__")
    assert foreign == []


def test_the_agent_reaches_no_control_plane_reader_or_offer() -> None:
    """The vendor clients it shares with them are in `spoteval.apis`; the planes, the event readers
    and the offers (with their SDKs) stay off the node."""
    modules, _ = _closure()
    above = ("spoteval.clouds", "spoteval.events", "spoteval.offers", "spoteval.operate", "spoteval.measure")
    assert sorted(m for m in modules if m.startswith(above)) == []


def test_each_exemption_is_still_an_import_of_its_module() -> None:
    for module, name in NOT_ON_THE_NODE:
        path = _file_of(module)
        assert path is not None and name in {n.split(".")[0] for n in _imports(path, module)}


def test_the_bundle_holds_every_project_module_the_agent_reaches() -> None:
    modules, _ = _closure()
    bundled = {str(p.relative_to(ROOT)) for p in source_files()}
    missing = sorted(m for m in modules if str(_file_of(m).relative_to(ROOT)) not in bundled)  # type: ignore[union-attr]
    assert missing == []


_PROBE = """
import importlib, json, sys
before = set(sys.modules)
for name in sys.argv[1:]:
    importlib.import_module(name)
loaded = {m.split(".")[0] for m in set(sys.modules) - before}
print(json.dumps(sorted(m for m in loaded if m not in sys.stdlib_module_names)))
"""


def test_importing_every_agent_module_loads_nothing_beyond_the_standard_library_and_obstore() -> None:
    """In a fresh interpreter: what importing every module of the agent adds to `sys.modules`,
    beyond the standard library, is the project's own and obstore."""
    names = sorted({_module_of(p) for p in AGENT.rglob("*.py")})
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, *names], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert set(json.loads(done.stdout)) - ALLOWED == {"spoteval"}
