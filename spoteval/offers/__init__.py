"""Where and on what, right now: the grant's offers, their prices read now, ranked by the decision.

- `prices`: an offer (provider x region x instance type x market) and its price as read now, with
  what the price is (spot history or current, per zone, region or globally, its currency, when it
  was read); `read_prices` asks one reader per provider (`aws`, `gcp`, `azure`, `runpod`, `nebius`).
- `instances`: GPUs, vCPUs and memory per instance type (a provider fact).
- `evidence`: tau and S per offer, from a run record, a trace, or the workload.
- `rank`: every offer put through the placement's closed form and simulation, ranked.

Nothing here starts, stops or changes anything: only prices are read.
"""
