"""Claims: the nodes of one run divide its episodes among themselves through the run record alone.

No coordinator, no database, no list of nodes given in advance: a node that joins (a replacement
with an id nobody knew) reads the record and takes its share. The only primitive is the store's
create-only write (`Store.put_new`: S3 `If-None-Match: *`, Azure `If-None-Match: *`, GCS
`ifGenerationMatch=0`, an exclusive local create): of several writers of one key, exactly one
creates it. Nothing is ever overwritten or deleted. (GCS is not tested here: the GCS emulator that
installs from PyPI ignores preconditions, so a race on it would prove nothing.)

Layout, under `runs/{run_id}/pool/` (every object create-only; readers that do not know the
prefix ignore it):

    plan.json                      the first node's parameters, for every node: episodes, batch (B,
                                   episodes per chunk), renew_s, expiry_s, manifest_sha256
    chunks/{c:08d}/{m:06d}.json    the log of chunk c (manifest positions c*B .. c*B+B-1):
                                   entry m = {op, holder, node, ranges, from, lease, time, nonce}
    leases/{holder}/{k:08d}.json   a holder's lease stream: k = 0, 1, 2 ... each {holder, k, node,
                                   time, state, end, by, nonce}; `end` on the last one only
    holders/{i:08d}.json           the registry: one per holder, in the order they joined
    summaries/{n:08d}.json         run-wide summaries for fast starts (`spoteval.claims.summary`)

A *holder* is one incarnation of one node (`{node}.{incarnation}`); it holds claims while its lease
stream is open.

Claiming. Chunks are claimed in order: a node creates entry 0 of chunk c (`claim`) only after it
has seen entry 0 of chunk c-1, so claimed chunks are a prefix and a start finds the first free one
with O(log) probes. Entry 0's create-only write has one winner: the chunk is its holder's. One write
claims B episodes (the batch), so short episodes do not cost a round trip each. The holder then
marks what it starts (`start` entries, a quarter of a chunk or more at a time; a claim may start
some at once). Every later entry is appended at the log's next free position, create-only: a
writer that finds the position taken reads the entry there and decides again. The log is thus one
total order that every reader replays to the same state (`ChunkLog`): per episode, its owner and
whether the owner started it.

Leases and expiry. A holder renews by creating lease k+1 every `renew_s` (its `state` carries what
a start needs: counts, in-flight attempts, billed totals). A node that watches a holder owing
episodes notes, on its OWN monotonic clock, when it first saw the holder's latest lease k; when no
lease k+1 has appeared for `expiry_s` of that clock, it ends the lease by creating lease k+1 itself
with `end: expired` (a tombstone). Create-only decides the race between that tombstone and a late
renewal: if the holder's renewal wins, the holder is alive and the watcher starts its wait again; if
the tombstone wins, the holder's next renewal fails, and it learns it has been *fenced*: it gives
up every claim of that holder id and rejoins under a new one. A lease once ended never renews again
(its next key is taken forever), so "ended" is a fact every reader agrees on. Only then may a node
take the holder's episodes over: a `takeover` entry moves every episode the ended holder owned (and
the log does not mark done) to the writer, not started, except those in its `ranges`, which the
taker settled (their outcome is recorded: it checked the record before writing the entry) and
which come over started, so nobody runs them again; two takers race for the log position and the
second finds nothing left to take. A holder that leaves in good order marks done what has its
result and writes its own end (`released`), and its unfinished episodes are taken over at once; a
node that restarts takes its own earlier holders' episodes back (what they had started stays
started) and then ends their leases (`replaced`) without waiting, as they cannot be alive. The
rules for a takeover's check, a reclaim and what a node's attempts may do once its lease ended are
in `spoteval.claims.takeover`.

Why clock skew is harmless: no node ever compares its clock with another node's. Wall times in the
objects are for people and reports. Expiry is a duration measured by the watcher alone from when it
saw a lease, and every renewal the holder makes resets it; clock rates differ by parts per million.
The holder's own rule is stricter: it starts episodes from its claims only while its latest
successful renewal began less than `expiry_s / 2` ago (its clock). A watcher's wait begins after
the holder began that renewal (it cannot see a lease before it is written), so the holder stops
starting episodes at least `expiry_s / 2` before any watcher may end its lease. Correctness does
not rest on that margin (the tombstone and the one-winner log do that): it bounds duplicated work
to the attempts a holder had in flight when its lease ended, and, with the same margin for the
holder's attempt writes (`spoteval.claims.takeover`), it keeps an episode from completing twice
unless one write of a finished attempt takes longer than `expiry_s / 2` to reach the store; the
first result stays the result (results/ is create-only). A watcher's wait counts only while the
store answers the watcher, so an outage that cuts every node off ends nobody's lease.

Stealing at the end. When nothing is left to claim or take over, a node reads the logs of chunks
whose owner has episodes not started, and appends a `steal` of the later half of the largest such
run: replayed in log order, a steal takes only episodes still not started at its position, and a
`start` only episodes its writer still owns; so the holder and the thief never both start one. A
slow node therefore keeps only what it has started; a lost one loses its episodes after the expiry.

Bad objects. An entry that does not parse changes nothing and is reported (the episodes it would
have moved stay with their earlier owner, or with nobody when entry 0 is unreadable: such episodes
are taken over like a dead holder's). A lease that does not parse counts as a renewal. A plan that
does not parse or names another manifest turns claims off on the node that reads it (it runs every
episode that has no result, as a single node does, and says so). In every case an episode may run
twice, and none is lost.

Done. A holder whose episodes of a chunk all have results appends `done` (their ranges), so later
readers know the chunk is complete without looking for each result. A single node claims every
chunk in order and runs the episodes in manifest order, as before.
"""

from __future__ import annotations

from spoteval.claims.io import Counting, StoreLike
from spoteval.claims.model import ChunkLog, Entry, Lease, Plan, PoolLayout, holder_id
from spoteval.claims.pool import Pool
from spoteval.claims.summary import StartView, Summary, read_start

__all__ = [
    "ChunkLog",
    "Counting",
    "Entry",
    "Lease",
    "Plan",
    "Pool",
    "PoolLayout",
    "StartView",
    "StoreLike",
    "Summary",
    "holder_id",
    "read_start",
]
