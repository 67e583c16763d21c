"""The stable names of the scalar metrics a snapshot and a restore report.

``SnapshotResult.metrics`` and ``RestoreReport.metrics`` carry these keys
(floats; seconds, bytes or counts), ready for a trainer's logger::

    logger.log_metrics({f"envckpt/{k}": v for k, v in result.metrics.items()}, step=step)

A name here never changes meaning; a new figure gets a new name.
``SNAPSHOT_METRICS`` and ``RESTORE_METRICS`` describe each one (the table in
docs/integration.md is checked against them by a test).
"""

from __future__ import annotations

# ---- one snapshot (SnapshotResult.metrics) ----------------------------------
SNAPSHOT_PAUSED_SECONDS = "snapshot_paused_seconds"
SNAPSHOT_ENV_SECONDS = "snapshot_env_seconds"
SNAPSHOT_RETIRE_SECONDS = "env_retire_seconds"
SNAPSHOT_PREPARE_SECONDS = "env_prepare_seconds"
SNAPSHOT_COMMIT_SECONDS = "env_commit_seconds"
SNAPSHOT_CUT_WAIT_SECONDS = "snapshot_cut_wait_seconds"
SNAPSHOT_CUT_SECONDS = "snapshot_cut_seconds"
SNAPSHOT_PUBLISH_SECONDS = "snapshot_publish_seconds"
SNAPSHOT_RESUME_SECONDS = "snapshot_resume_seconds"
SNAPSHOT_BYTES = "snapshot_bytes"
SNAPSHOT_TRAINER_BYTES = "snapshot_trainer_bytes"
SNAPSHOT_RECORDS_WRITTEN = "snapshot_records_written"
SNAPSHOT_EPISODES_PARKED = "env_exported_episodes"
SNAPSHOT_EPISODES_RESTARTED = "env_restarted_rollouts"
SNAPSHOT_INSTANCES = "env_instances"
SNAPSHOT_INSTANCE_PREPARE_P50 = "snapshot_instance_prepare_seconds_p50"
SNAPSHOT_INSTANCE_PREPARE_P90 = "snapshot_instance_prepare_seconds_p90"
SNAPSHOT_INSTANCE_PREPARE_MAX = "snapshot_instance_prepare_seconds_max"
SNAPSHOT_INSTANCE_COMMIT_P50 = "snapshot_instance_commit_seconds_p50"
SNAPSHOT_INSTANCE_COMMIT_P90 = "snapshot_instance_commit_seconds_p90"
SNAPSHOT_INSTANCE_COMMIT_MAX = "snapshot_instance_commit_seconds_max"
SNAPSHOT_PARTICIPANT_PREPARE_MAX = "snapshot_participant_prepare_seconds_max"
SNAPSHOT_PARTICIPANT_COMMIT_MAX = "snapshot_participant_commit_seconds_max"
SNAPSHOT_FAILURES_TOTAL = "snapshot_failures_total"

# (name, unit, meaning), in the order docs/integration.md lists them.
SNAPSHOT_METRICS: tuple[tuple[str, str, str], ...] = (
    (SNAPSHOT_PAUSED_SECONDS, "s", "how long rollouts were paused (dispatch closed to resumed)"),
    (
        SNAPSHOT_ENV_SECONDS,
        "s",
        "the environment's capture: pause start to every instance committed",
    ),
    (SNAPSHOT_RETIRE_SECONDS, "s", "retiring attempts the ledger dropped"),
    (SNAPSHOT_PREPARE_SECONDS, "s", "every instance parked at a turn boundary"),
    (SNAPSHOT_COMMIT_SECONDS, "s", "every instance wrote its records"),
    (SNAPSHOT_CUT_WAIT_SECONDS, "s", "waiting for the data-plane cut"),
    (SNAPSHOT_CUT_SECONDS, "s", "holding the cut: capture checked, trainer state written"),
    (SNAPSHOT_PUBLISH_SECONDS, "s", "MANIFEST.json and the rename into snapshots/"),
    (SNAPSHOT_RESUME_SECONDS, "s", "resuming every instance"),
    (SNAPSHOT_BYTES, "B", "every file of the published snapshot"),
    (SNAPSHOT_TRAINER_BYTES, "B", "the data plane, ledger and sidecars"),
    ("env_manifest_bytes", "B", "gym_checkpoint.json"),
    (SNAPSHOT_RECORDS_WRITTEN, "count", "records every participant wrote"),
    (
        SNAPSHOT_EPISODES_PARKED,
        "count",
        "rollouts saved at a turn boundary (a restore continues them)",
    ),
    (SNAPSHOT_EPISODES_RESTARTED, "count", "rollouts no participant could capture (they restart)"),
    ("env_unowned_live_episodes", "count", "parked agent sessions no /run owns"),
    ("env_staging_keys", "count", "token rows the snapshot keeps"),
    (SNAPSHOT_INSTANCES, "count", "Gym instances in the snapshot"),
    ("env_paused_seconds", "s", "the pause as the environment backend saw it"),
    (SNAPSHOT_INSTANCE_PREPARE_P50, "s", "median instance prepare"),
    (SNAPSHOT_INSTANCE_PREPARE_P90, "s", "90th percentile instance prepare"),
    (SNAPSHOT_INSTANCE_PREPARE_MAX, "s", "slowest instance prepare (it held the pause)"),
    (SNAPSHOT_INSTANCE_COMMIT_P50, "s", "median instance commit"),
    (SNAPSHOT_INSTANCE_COMMIT_P90, "s", "90th percentile instance commit"),
    (SNAPSHOT_INSTANCE_COMMIT_MAX, "s", "slowest instance commit"),
    (SNAPSHOT_PARTICIPANT_PREPARE_MAX, "s", "slowest single participant's prepare call"),
    (SNAPSHOT_PARTICIPANT_COMMIT_MAX, "s", "slowest single participant's commit call"),
    (SNAPSHOT_FAILURES_TOTAL, "count", "snapshots this snapshotter saw fail so far"),
)

# ---- one restore (RestoreReport.metrics) ------------------------------------
RESTORE_SECONDS = "restore_seconds"
RESTORE_CHECK_SECONDS = "restore_check_seconds"
RESTORE_ENVIRONMENT_SECONDS = "restore_environment_seconds"
RESTORE_LEDGER_SECONDS = "restore_ledger_seconds"
RESTORE_RESUME_SECONDS = "restore_resume_seconds"
RESTORE_CONTINUED = "restore_continued_episodes"
RESTORE_RESTARTED = "restore_restarted_rollouts"
RESTORE_REFUSED = "restore_refused_snapshots"
RESTORE_CLEARED_ROWS = "restore_cleared_rows"
RESTORE_INSTANCES = "restore_instances"
RESTORE_INSTANCE_P50 = "restore_instance_seconds_p50"
RESTORE_INSTANCE_MAX = "restore_instance_seconds_max"

RESTORE_METRICS: tuple[tuple[str, str, str], ...] = (
    (RESTORE_SECONDS, "s", "the whole restore, from the first check to resumed"),
    (RESTORE_CHECK_SECONDS, "s", "checking trainer-side files (refused snapshots included)"),
    (RESTORE_ENVIRONMENT_SECONDS, "s", "every Gym instance restored its participants"),
    (RESTORE_LEDGER_SECONDS, "s", "the ledger continued the restored rollouts"),
    (RESTORE_RESUME_SECONDS, "s", "resuming every instance"),
    (RESTORE_CONTINUED, "count", "rollouts that continue at their saved turn"),
    (RESTORE_RESTARTED, "count", "rollouts that restart from their task"),
    (RESTORE_REFUSED, "count", "snapshots refused (moved to refused/) before one was usable"),
    (RESTORE_CLEARED_ROWS, "count", "data-plane rows nothing referenced any more"),
    (RESTORE_INSTANCES, "count", "Gym instances restored"),
    (RESTORE_INSTANCE_P50, "s", "median instance restore"),
    (RESTORE_INSTANCE_MAX, "s", "slowest instance restore"),
)

ALL_METRICS = tuple(name for name, _, _ in (*SNAPSHOT_METRICS, *RESTORE_METRICS))
