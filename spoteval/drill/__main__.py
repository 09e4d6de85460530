"""`python -m spoteval.drill node --config agent.json --boot-file FILE`: the drill node's startup path."""

from spoteval.drill.node import main

raise SystemExit(main())
