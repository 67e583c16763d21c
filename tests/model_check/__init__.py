"""An exhaustive, deterministic model check of the real engine (``python -m model_check``).

The explorer runs the real facade, adapters, coordinators and participant
cores (in-process transport, a clock that only moves when told to) and
enumerates every interleaving of a small configuration by breadth-first
search over replayed action paths:

    config = BOUNDED                       # or TINY, FULL (``--tiny``, ``--full``)
    result = explore(config)               # states, transitions, depth, violations
    print(result.report())                 # a violation prints its shortest trace

``world`` builds one run (generations of processes, the trainer's program,
the rollouts), ``gates`` holds every control request until the explorer
delivers it (or injects a fault into it), ``digest`` hashes the state, and
``invariants`` checks it. ``oracle`` is a reference model of the protocol
written from docs/protocol.md (no machine tables) and ``observe`` holds the
engine against it at every delivered call; ``plant`` puts issue 23's bugs
into copies for ``test_oracle``.
"""
