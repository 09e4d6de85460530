"""obstore is pinned once (`spoteval.store.OBSTORE_REQUIREMENT`): the package's dependency, the
scripts' requirements and what every node installs say the same, and no other file spells a pin."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from spoteval.store import OBSTORE_REQUIREMENT

ROOT = Path(__file__).resolve().parents[1]
PIN = re.compile(r"obstore\s*(?:[<>=!~]=?)\s*\d")


def test_pyproject_and_requirements_say_the_one_pin() -> None:
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert re.findall(r"^dependencies = (.*)$", pyproject, re.M) == [f'["{OBSTORE_REQUIREMENT}"]']
    lines = [ln.strip() for ln in (ROOT / "requirements.txt").read_text().splitlines()]
    assert [ln for ln in lines if ln.startswith("obstore")] == [OBSTORE_REQUIREMENT]


def test_no_other_file_spells_an_obstore_pin() -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    spelled = sorted(
        name
        for name in tracked
        if name.endswith((".py", ".sh", ".txt", ".toml", ".yaml", ".cfg", ".md", "Makefile"))
        and (ROOT / name).is_file()
        and PIN.search((ROOT / name).read_text(errors="replace"))
    )
    assert spelled == ["pyproject.toml", "requirements.txt", "spoteval/store.py"]
