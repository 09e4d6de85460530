"""`python -m spoteval.harness run ...`: run one shard of a task (see spoteval/harness/runner.py)."""

from spoteval.harness.runner import main

raise SystemExit(main())
