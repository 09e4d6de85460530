"""The agent bundle: what goes to every node, as one deterministic zip archive, and how a node unpacks it.

    agent-bundle.zip
        spoteval/...                 the pure-Python package (sources, the shipped tasks' data)
        eval/...                     the user's eval project, when the stack or drill names one
                                     (the task's folder, or `eval.workdir`), as it is at home
        eval.json                    what the eval project is: {"format", "files", "bytes", "sha256",
                                     "requirements"} (present only with an eval project)

- build.py: the archive (sorted entries, fixed times, modes 0644/0755), for `pulumi up`, the stack
  check, `scripts.plan` and the drill alike;
- project.py: which files of the eval project ship (.gitignore-style excludes, a size limit, no
  credential-looking file unless the user names it);
- ignore.py: the .gitignore pattern rules;
- unpack.py (standard library only): a node unpacks the archive into a fresh folder and runs from
  there (`python -m spoteval.bundle unpack ZIP DIR`, which also runs from the zip itself).

Importing this package imports nothing else: the node runs `unpack` with the standard library.
"""

from __future__ import annotations

from typing import Final

#: the folder of the archive that holds the user's eval project
EVAL_DIR: Final = "eval"
#: the archive's description of its eval project
EVAL_JSON: Final = "eval.json"
