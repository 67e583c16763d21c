"""Tests for envckpt.config: the checkpointing block from YAML, a mapping or OmegaConf."""

from __future__ import annotations

import dataclasses
import pickle
import re
import signal
import textwrap
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from pydantic import BaseModel

from envckpt.config import CheckpointingConfig, ConfigError, load_config
from envckpt.facade.timeouts import CheckpointTimeouts
from envckpt.trainer.preemption import JobSignals
from envckpt.trainer.snapshot_loop import SnapshotPolicy

RUN_YAML = """
policy:
  model_name: some-model
checkpointing:
  root: /ckpt/rollouts
  keep_latest_k: 5
  max_in_flight_per_instance: 8
  snapshots:
    every_seconds: 120
    max_consecutive_failures: 2
  timeouts:
    prepare_seconds: 30
    resume_attempts: 5
  preemption:
    grace_seconds: 45
    snapshot_signals: [SIGUSR2]
  restore:
    data_plane_path: /run/dataplane.sqlite
    allow_fresh_start: true
"""


def test_a_yaml_files_checkpointing_block_sets_every_object(tmp_path: Path) -> None:
    """Each field reaches its constructor; what the block leaves out keeps its default."""
    path = tmp_path / "run.yaml"
    path.write_text(RUN_YAML)
    config = load_config(path)
    assert config.root == Path("/ckpt/rollouts")
    assert config.checkpoint_timeouts() == CheckpointTimeouts(
        prepare_seconds=30.0, resume_attempts=5
    )
    assert config.snapshot_policy() == SnapshotPolicy(
        every_seconds=120.0, max_consecutive_failures=2
    )
    signals = config.job_signals()
    assert (signals.grace_seconds, signals.snapshot_signals) == (45.0, (signal.SIGUSR2,))
    assert signals.preempt_signals == (signal.SIGTERM,)
    kwargs = config.start_trainer_kwargs()
    assert kwargs["data_plane_path"] == Path("/run/dataplane.sqlite")
    assert (kwargs["keep_latest_k"], kwargs["max_in_flight_per_instance"]) == (5, 8)
    assert kwargs["allow_fresh_start"] is True
    assert config.snapshotter_kwargs() == {"keep_latest_k": 5}


def test_the_defaults_are_the_constructors_defaults() -> None:
    """A block with only the root builds exactly what the constructors build by default."""
    config = CheckpointingConfig(root=Path("/r"))
    assert config.checkpoint_timeouts() == CheckpointTimeouts()
    assert config.snapshot_policy() == SnapshotPolicy()
    default = JobSignals()
    built = config.job_signals()
    assert (built.grace_seconds, built.preempt_signals, built.snapshot_signals) == (
        default.grace_seconds,
        default.preempt_signals,
        default.snapshot_signals,
    )
    assert config.keep_latest_k == 3 and config.data_plane_path() == Path("/r/live.sqlite")
    assert config.start_trainer_kwargs()["allow_fresh_start"] is False
    fields = {field.name for field in dataclasses.fields(CheckpointTimeouts)}
    assert set(config.timeouts.model_dump()) == fields, "every timeout is configurable"
    fields = {field.name for field in dataclasses.fields(SnapshotPolicy)}
    assert set(config.snapshots.model_dump()) == fields, "every policy knob is configurable"


def test_an_omegaconf_node_is_read_with_its_interpolations() -> None:
    """A DictConfig (the whole config or the block itself) resolves ${...} first."""
    node = OmegaConf.create(
        {"run_dir": "/runs/7", "checkpointing": {"root": "${run_dir}/snapshots"}}
    )
    assert load_config(node).root == Path("/runs/7/snapshots")
    assert load_config(node.checkpointing, key=None).root == Path("/runs/7/snapshots")
    nested = OmegaConf.create({"checkpointing": {"rollouts": {"root": "/x"}}})
    assert load_config(nested, key="checkpointing.rollouts").root == Path("/x")


def test_unknown_keys_are_refused_naming_the_key_and_the_known_ones() -> None:
    """A typo anywhere in the block is a ConfigError with the dotted key and the valid keys."""
    block = {
        "root": "/r",
        "snapshotz": {},
        "timeouts": {"prepare_secnds": 3},
    }
    with pytest.raises(ConfigError) as caught:
        load_config({"checkpointing": block})
    problems = sorted(caught.value.problems)
    assert problems[0].startswith(
        "checkpointing.snapshotz: unknown key (known here: keep_latest_k,"
    )
    assert problems[1].startswith("checkpointing.timeouts.prepare_secnds: unknown key")
    assert "prepare_seconds" in problems[1]
    assert pickle.loads(pickle.dumps(caught.value)).problems == caught.value.problems


@pytest.mark.parametrize(
    ("block", "expected"),
    [
        ({}, "checkpointing.root: required"),
        ({"root": "/r", "keep_latest_k": 0}, "checkpointing.keep_latest_k: Input should be"),
        ({"root": "/r", "timeouts": {"commit_seconds": -1}}, "timeouts.commit_seconds"),
        ({"root": "/r", "snapshots": {"every_seconds": 0}}, "snapshots.every_seconds"),
        ({"root": "/r", "preemption": {"preempt_signals": ["SIGKILL"]}}, "preempt_signals"),
        ({"root": "/r", "snapshots": {"keep_running_unprotected": "maybe"}}, "'maybe'"),
    ],
)
def test_bad_values_are_refused_with_the_value_and_the_rule(
    block: dict[str, object], expected: str
) -> None:
    """Missing roots, non-positive counts and durations, and unknown signals are refused."""
    with pytest.raises(ConfigError, match=expected.replace("[", r"\[")):
        load_config({"checkpointing": block})


def test_a_missing_block_or_file_says_so(tmp_path: Path) -> None:
    """No checkpointing block, a block that is no mapping, or an unreadable file: ConfigError."""
    with pytest.raises(ConfigError, match="'checkpointing' is not in it"):
        load_config({"policy": {}})
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_config({"checkpointing": ["root"]})
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text(textwrap.dedent("checkpointing:\n  root: [unclosed\n"))
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def leaf_fields(model: type[BaseModel], prefix: str = "") -> set[str]:
    names = set()
    for name, info in model.model_fields.items():
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            names |= leaf_fields(annotation, f"{prefix}{name}.")
        else:
            names.add(f"{prefix}{name}")
    return names


def test_every_field_is_documented_in_the_integration_guide() -> None:
    """docs/integration.md has one table row per field, no more and no fewer."""
    docs = Path(__file__).resolve().parents[1] / "docs" / "integration.md"
    section = docs.read_text().split("## Configuration", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `([a-z_.]+)` \|", section, re.MULTILINE))
    assert documented == leaf_fields(CheckpointingConfig)
