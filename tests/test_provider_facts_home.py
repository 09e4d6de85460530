"""Every provider fact lives in its provider's module in spoteval/providers/: no other module of
spoteval/, components/ or scripts/ holds a provider's metadata URL or path, price or API endpoint,
or a table of notice seconds or of providers billed from boot.

Only code counts (string constants and literals, found with `ast`): docstrings and comments may name
an endpoint when they explain what the code does with the fact it reads from spoteval/providers/.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HOME = ROOT / "spoteval" / "providers"
#: provider-specific addresses: metadata services and their paths, price and control API endpoints
ADDRESSES = re.compile(
    "|".join(
        [
            r"169\.254\.169\.254",
            r"metadata\.google\.internal",
            r"metadata\.nebius\.internal",
            r"/latest/(meta-data|api/token)",
            r"/computeMetadata/v1",
            r"/metadata/(scheduledevents|instance)",
            r"/v1/(iam/sa/token|instance-data)",
            r"prices\.azure\.com",
            r"cloudbilling\.googleapis\.com",
            r"api\.runpod\.io",
            r"rest\.runpod\.io",
            r"https://ec2\.",
            r"storage\.\{region\}\.nebius\.cloud",
        ]
    )
)
PROVIDER_NAMES = frozenset(
    {"aws", "gcp", "azure", "k8s", "kubernetes", "nebius", "runpod", "gke", "eks", "aks", "karpenter"}
)


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the string constants that are docstrings."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _is_provider(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value in PROVIDER_NAMES


def _is_number(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, int | float)
        and not isinstance(node.value, bool)
    )


def findings(path: Path) -> list[str]:
    """What in `path` holds a provider fact, one line each (`line: what`)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = _docstrings(tree)
    out: list[str] = []
    for node in ast.walk(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            match = ADDRESSES.search(node.value)
            if match:
                out.append(f"{line}: address {match.group(0)!r}")
        elif isinstance(node, ast.Dict):
            pairs = zip(node.keys, node.values, strict=True)
            if any(k is not None and _is_provider(k) and _is_number(v) for k, v in pairs):
                out.append(f"{line}: a table of seconds (or prices) per provider")
        elif isinstance(node, ast.Set | ast.Tuple | ast.List):
            if len(node.elts) >= 3 and all(_is_provider(e) for e in node.elts):
                out.append(f"{line}: a list of providers sharing a fact")
        elif isinstance(node, ast.keyword) and node.arg in ("notice_s", "grace_s") and _is_number(node.value):
            out.append(f"{line}: {node.arg}={ast.literal_eval(node.value)}")
    return sorted(out, key=lambda text: int(text.split(":")[0]))


def _modules() -> list[str]:
    paths = [p for folder in ("spoteval", "components", "scripts") for p in (ROOT / folder).rglob("*.py")]
    kept = [p for p in paths if HOME not in p.parents and "__pycache__" not in p.parts]
    return sorted(p.relative_to(ROOT).as_posix() for p in kept)


@pytest.mark.parametrize("module", _modules())
def test_no_provider_fact_outside_the_fact_modules(module: str) -> None:
    assert findings(ROOT / module) == []


def test_the_check_finds_what_it_looks_for(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""Docstrings may say http://169.254.169.254."""\n'
        "# so may comments: https://prices.azure.com\n"
        'URL = "http://metadata.google.internal"\n'
        'NOTICE = {"aws": 120.0, "gcp": 30}\n'
        'BOOT = frozenset({"aws", "gcp", "azure"})\n'
        "FACTS = Facts(notice_s=60)\n"
        'PATH = f"{base}/latest/meta-data/instance-id"\n'
        'FINE = {"aws": "components.aws", "local": 10}\n'
    )
    assert findings(sample) == [
        "3: address 'metadata.google.internal'",
        "4: a table of seconds (or prices) per provider",
        "5: a list of providers sharing a fact",
        "6: notice_s=60",
        "7: address '/latest/meta-data'",
    ]
    assert all(findings(HOME / f"{name}.py") != [] for name in ("aws", "gcp", "azure"))  # their home
