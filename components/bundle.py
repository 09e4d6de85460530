"""The node agent bundle in the stack: where it goes in the bucket (spoteval/bundle/ builds it).

The program uploads the archive into the result bucket (VMs) or a ConfigMap (Kubernetes); the node
unpacks it into a fresh folder before every start of the agent and puts that folder on `PYTHONPATH`
(components/startup.py):

    agent-bundle.zip
        spoteval/__init__.py, agent/..., harness/..., ...   the package
        eval/...                                             the user's eval project (eval.task's
                                                             folder, or eval.workdir), when named
        eval.json                                            what the eval project holds

The archive is deterministic (sorted entries, fixed timestamps and permissions), so the same source
gives the same bytes and the same hash, and `pulumi preview` shows no change when nothing changed.
"""

from __future__ import annotations

from typing import Final

from spoteval.bundle.build import DATA_SUFFIXES, PACKAGE, Bundle, build_bundle, source_files, write_bundle

#: object key of the bundle inside the result bucket (outside the run record's `runs/` prefix)
OBJECT_KEY: Final = "spot-eval/agent-bundle.zip"
#: object key of the staged manifest the node registers for its run
MANIFEST_KEY: Final = "spot-eval/manifest.jsonl"

__all__ = [
    "DATA_SUFFIXES",
    "MANIFEST_KEY",
    "OBJECT_KEY",
    "PACKAGE",
    "Bundle",
    "build_bundle",
    "source_files",
    "write_bundle",
]
