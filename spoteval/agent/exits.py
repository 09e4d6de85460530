"""The node agent's exit codes, one meaning each. Everything that reacts to how the agent ended reads
them from here: the systemd unit (components/startup.py), the Kubernetes Job's podFailurePolicy
(components/kubernetes.py) and the README's agent section.

| code | meaning | what runs the agent should do |
|---|---|---|
| 0 `OK` | the run ended by a notice or a stop rule, or the manifest is in place | nothing: done |
| 1 `FAILED` | the run could not go on (model server failed, power-off failed, the store refuses writes for good, objects left in the spool) | start it again (the next start uploads the spool) |
| 2 `BAD_INPUT` | bad input: config, option, manifest, missing command; nothing was written | stop retrying: a retry cannot help |
| 75 `STORE_UNREACHABLE` | the store did not answer at start (network, identity not ready yet); nothing was written | retry later: transient (`EX_TEMPFAIL` of sysexits.h) |
"""

from __future__ import annotations

from typing import Final

OK: Final = 0
FAILED: Final = 1
BAD_INPUT: Final = 2
#: sysexits.h EX_TEMPFAIL: "a temporary failure ... the user is invited to retry"
STORE_UNREACHABLE: Final = 75
#: codes after which starting the agent again cannot help
PERMANENT: Final = frozenset({BAD_INPUT})
#: codes after which starting it again is expected to succeed
TRANSIENT: Final = frozenset({FAILED, STORE_UNREACHABLE})
