"""The node agent's exit codes, one meaning each. Everything that reacts to how the agent ended reads
them from here: the systemd unit (components/startup.py), the Kubernetes Job's podFailurePolicy
(components/kubernetes.py) and the README's agent section.

- 0 `OK`: the run ended by a notice or a stop rule, or the manifest is in place. Nothing to do.
- 1 `FAILED`: the run could not go on (model server failed, power-off failed, the store refuses
  writes for good, objects left in the spool). Start it again: the next start uploads the spool.
- 2 `BAD_INPUT`: config, option, manifest or a missing command; nothing was written. Retrying
  cannot help: the systemd unit gives up after its start limit, the Kubernetes Job fails.
- 3 `HARNESS_ERRORS`: the run ended and every episode's result is a harness error (a missing
  harness, a task that does not load, a failed requirements install): it measured nothing, and
  starting it again cannot help. The systemd unit does not restart it; the Kubernetes Job fails.
- 75 `STORE_UNREACHABLE`: the store did not answer at start (network, an identity not usable yet);
  nothing was written. Transient (`EX_TEMPFAIL` of sysexits.h): retried, never fails the Job.
"""

from __future__ import annotations

from typing import Final

OK: Final = 0
FAILED: Final = 1
BAD_INPUT: Final = 2
HARNESS_ERRORS: Final = 3
#: sysexits.h EX_TEMPFAIL: "a temporary failure ... the user is invited to retry"
STORE_UNREACHABLE: Final = 75
#: codes after which starting the agent again cannot help
PERMANENT: Final = frozenset({BAD_INPUT, HARNESS_ERRORS})
#: codes after which starting it again is expected to succeed
TRANSIENT: Final = frozenset({FAILED, STORE_UNREACHABLE})
