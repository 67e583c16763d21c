"""A participant served by several uvicorn workers, answering as one participant.

``mount_worker_participant`` (``mount``) is the entry point; ``slots`` (who
the workers are), ``siblings`` (calls between them), ``group`` (each control
request run by every worker), ``merge`` (their answers as one),
``commit_merge`` (the one records file) and ``affinity`` (each rollout's data
requests on the worker that holds it) are its parts. docs/protocol.md,
"Servers with several workers", describes the behaviour.
"""

from envckpt.http.workers.group import WorkerGroup
from envckpt.http.workers.mount import mount_worker_participant
from envckpt.http.workers.slots import Registration, WorkerDirectory, owner_slot

__all__ = [
    "Registration",
    "WorkerDirectory",
    "WorkerGroup",
    "mount_worker_participant",
    "owner_slot",
]
