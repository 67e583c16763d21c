"""One settings model for a trainer's rollout checkpointing, loadable from YAML or OmegaConf.

    config = load_config("run.yaml")                 # the file's ``checkpointing:`` block
    config = load_config(cfg.checkpointing, key=None)  # an OmegaConf node (or a dict) as it is
    facade = GymEnvironmentCheckpoint(instances, timeouts=config.checkpoint_timeouts())
    started = await start_trainer(tasks, facade=facade, backend=b, barrier=barrier,
                                  staging=staging, **config.start_trainer_kwargs())
    report = await started.job.run()                 # snapshots on config.snapshots' schedule

Every field mirrors one constructor argument (``CheckpointTimeouts``,
``RolloutSnapshotter``, ``SnapshotPolicy``, ``JobSignals``, ``Restorer``,
``RolloutJob``) with the same default, so a block may give only what it
changes. Unknown keys and wrong values raise ``ConfigError`` naming the key,
the value and what is allowed. docs/integration.md documents every field.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    NonNegativeFloat,
    PositiveFloat,
    PositiveInt,
    ValidationError,
)

from envckpt.errors import EnvckptError
from envckpt.facade.timeouts import CheckpointTimeouts
from envckpt.trainer.preemption import JobSignals
from envckpt.trainer.snapshot_loop import SnapshotPolicy

DEFAULT_KEY = "checkpointing"
LIVE_DATA_PLANE = "live.sqlite"
SignalName = Literal["SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2", "SIGHUP"]
# The built objects' own defaults, so a field's default and its constructor's never drift.
_TIMEOUTS = CheckpointTimeouts()
_POLICY = SnapshotPolicy()


class ConfigError(EnvckptError, ValueError):
    """A checkpointing block that cannot be used: ``problems`` lists each key and why."""

    _fields: ClassVar[tuple[str, ...]] = ("message", "problems")

    def __init__(self, message: str, *, problems: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.problems = tuple(problems)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TimeoutsConfig(_Section):
    """``CheckpointTimeouts``: seconds each control step may take, and resume retries."""

    prepare_seconds: PositiveFloat = _TIMEOUTS.prepare_seconds
    commit_seconds: PositiveFloat = _TIMEOUTS.commit_seconds
    control_seconds: PositiveFloat = _TIMEOUTS.control_seconds
    restore_seconds: PositiveFloat = _TIMEOUTS.restore_seconds
    renew_interval_seconds: PositiveFloat = _TIMEOUTS.renew_interval_seconds
    resume_attempts: PositiveInt = _TIMEOUTS.resume_attempts

    def build(self) -> CheckpointTimeouts:
        return CheckpointTimeouts(**self.model_dump())


class SnapshotScheduleConfig(_Section):
    """``SnapshotPolicy``: when the job snapshots, and what failed snapshots mean."""

    every_seconds: PositiveFloat | None = _POLICY.every_seconds
    min_running_ratio: NonNegativeFloat = _POLICY.min_running_ratio
    max_consecutive_failures: PositiveInt = _POLICY.max_consecutive_failures
    keep_running_unprotected: bool = _POLICY.keep_running_unprotected
    retry_initial_seconds: NonNegativeFloat = _POLICY.retry_initial_seconds
    retry_max_seconds: NonNegativeFloat = _POLICY.retry_max_seconds

    def build(self) -> SnapshotPolicy:
        return SnapshotPolicy(**self.model_dump())


class PreemptionConfig(_Section):
    """``JobSignals``: the grace period after SIGTERM, and which signals do what."""

    grace_seconds: PositiveFloat = 30.0
    preempt_signals: tuple[SignalName, ...] = ("SIGTERM",)
    snapshot_signals: tuple[SignalName, ...] = ("SIGUSR1",)

    def build(self) -> JobSignals:
        return JobSignals(
            grace_seconds=self.grace_seconds,
            preempt_signals=[signal.Signals[name] for name in self.preempt_signals],
            snapshot_signals=[signal.Signals[name] for name in self.snapshot_signals],
        )


class RestoreConfig(_Section):
    """``Restorer``: where the restored data plane is installed and run, and fresh starts."""

    data_plane_path: Path | None = None
    allow_fresh_start: bool = False


class CheckpointingConfig(_Section):
    """The whole ``checkpointing:`` block."""

    root: Path
    keep_latest_k: PositiveInt = 3
    max_in_flight_per_instance: PositiveInt | None = None
    snapshots: SnapshotScheduleConfig = SnapshotScheduleConfig()
    timeouts: TimeoutsConfig = TimeoutsConfig()
    preemption: PreemptionConfig = PreemptionConfig()
    restore: RestoreConfig = RestoreConfig()

    def checkpoint_timeouts(self) -> CheckpointTimeouts:
        """For ``GymEnvironmentCheckpoint(instances, timeouts=...)``."""
        return self.timeouts.build()

    def snapshot_policy(self) -> SnapshotPolicy:
        """For ``RolloutJob(snapshot_policy=...)`` or ``SnapshotLoop(policy=...)``."""
        return self.snapshots.build()

    def job_signals(self) -> JobSignals:
        """For ``RolloutJob(signals=...)``; call ``install()`` inside the job's loop."""
        return self.preemption.build()

    def data_plane_path(self) -> Path:
        """The live data plane: ``restore.data_plane_path``, or ``<root>/live.sqlite``."""
        return self.restore.data_plane_path or self.root / LIVE_DATA_PLANE

    def snapshotter_kwargs(self) -> dict[str, Any]:
        """For ``RolloutSnapshotter(root, ..., **kwargs)``."""
        return {"keep_latest_k": self.keep_latest_k}

    def start_trainer_kwargs(self) -> dict[str, Any]:
        """For ``start_trainer(tasks, ..., **kwargs)``: everything this block configures."""
        return {
            "root": self.root,
            "data_plane_path": self.data_plane_path(),
            "keep_latest_k": self.keep_latest_k,
            "max_in_flight_per_instance": self.max_in_flight_per_instance,
            "snapshot_policy": self.snapshot_policy(),
            "signals": self.job_signals(),
            "allow_fresh_start": self.restore.allow_fresh_start,
        }


def load_config(source: Any, *, key: str | None = DEFAULT_KEY) -> CheckpointingConfig:
    """The block at ``key`` (dotted; None: all of it) of a YAML file, mapping or OmegaConf node.

    A path (``str`` or ``os.PathLike``) is read as YAML; an OmegaConf node is
    resolved to plain containers first. ``ConfigError`` for anything unusable.
    """
    where = key or "the configuration"
    if isinstance(source, str | os.PathLike):
        document: Any = _read_yaml(Path(source))
        where = f"{source}: {where}"
    else:
        document = _plain(source)
    block = _at(document, key, where)
    try:
        return CheckpointingConfig.model_validate(block)
    except ValidationError as error:
        problems = tuple(_problem(key, item) for item in error.errors())
        raise ConfigError(f"invalid {where}: " + "; ".join(problems), problems=problems) from None


def _read_yaml(path: Path) -> Any:
    import yaml  # a dependency of envckpt; imported here, where YAML is read

    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError(f"cannot read {path}: {error.strerror or error}") from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{path} is not valid YAML: {error}") from None


def _plain(node: Any) -> Any:
    """An OmegaConf node as plain dicts and lists (interpolations resolved); else itself."""
    if type(node).__module__.startswith("omegaconf"):
        from omegaconf import OmegaConf

        return OmegaConf.to_container(node, resolve=True)
    return node


def _at(document: Any, key: str | None, where: str) -> Mapping[str, Any]:
    block = document
    for part in key.split(".") if key else ():
        if not isinstance(block, Mapping) or part not in block:
            raise ConfigError(f"no {where} block: {key!r} is not in it")
        block = block[part]
    if not isinstance(block, Mapping):
        raise ConfigError(f"{where} must be a mapping of settings, got {type(block).__name__}")
    return block


def _problem(key: str | None, item: Mapping[str, Any]) -> str:
    location = ".".join([*([key] if key else []), *map(str, item["loc"])])
    if item["type"] == "extra_forbidden":
        known = ", ".join(_known_keys(tuple(item["loc"][:-1])))
        return f"{location}: unknown key (known here: {known})"
    if item["type"] == "missing":
        return f"{location}: required"
    return f"{location}: {item['msg']} (got {item.get('input')!r})"


def _known_keys(path: tuple[Any, ...]) -> list[str]:
    model: type[BaseModel] = CheckpointingConfig
    for part in path:
        annotation = model.model_fields[str(part)].annotation
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return []
        model = annotation
    return sorted(model.model_fields)
