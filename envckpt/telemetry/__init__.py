"""Telemetry a trainer already collects: typed records, stable metric names, exporters.

Every snapshot and every restore yields one typed record (``records``,
``restore_record``); its scalar figures land in ``SnapshotResult.metrics``
and ``RestoreReport.metrics`` under the stable names of ``names``. The
trainer appends each record to ``<root>/telemetry.jsonl`` (``log``), which
``envckpt report`` draws; ``observers`` hands each record to whatever the
host attached (``prometheus`` exposition, ``tracing`` spans), after the
environment resumed, never on the pause path.
"""
