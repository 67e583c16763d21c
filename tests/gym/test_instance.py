"""Tests for envckpt.gym.instance: a Gym instance's identity and its checkpoint directory."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from envckpt.gym.instance import GymCheckpointInstance

from helpers.examples import examples

# Safe path components: anything but separators, NUL, "." and "..".
shard_names = st.text(min_size=1, max_size=12).filter(
    lambda name: not ({"/", "\\", "\x00"} & set(name)) and name not in {".", ".."}
)
instances = st.builds(GymCheckpointInstance, shard_names, st.integers(0, 10_000))


@settings(max_examples=examples(300), deadline=None)
@given(instance=instances)
def test_parse_reads_back_every_instance_id(instance: GymCheckpointInstance) -> None:
    """parse(instance_id) gives the same instance back, for any legal shard and replica."""
    assert GymCheckpointInstance.parse(instance.instance_id) == instance


@settings(max_examples=examples(300), deadline=None)
@given(a=instances, b=instances)
def test_two_instances_share_a_directory_only_if_they_are_the_same(
    a: GymCheckpointInstance, b: GymCheckpointInstance
) -> None:
    """Siblings never share a checkpoint directory; one instance always gets the same one."""
    root = Path("/ckpt")
    assert (a.checkpoint_dir(root) == b.checkpoint_dir(root)) == (a == b)
    assert (a.instance_id == b.instance_id) == (a == b)


def test_the_directories_are_under_gym_instances() -> None:
    """Both the live capture and the checkpoint directory are <root>/gym-instances/<id>."""
    instance = GymCheckpointInstance("math", 2)
    assert instance.instance_id == "math/replica-2"
    assert instance.checkpoint_dir("/c") == Path("/c/gym-instances/math/replica-2")
    assert instance.live_capture_dir(Path("/live")) == Path("/live/gym-instances/math/replica-2")


def test_instances_order_by_shard_then_replica() -> None:
    """Sorting is by shard name, then replica index (numerically)."""
    unsorted = [
        GymCheckpointInstance("b", 0),
        GymCheckpointInstance("a", 10),
        GymCheckpointInstance("a", 2),
    ]
    assert [i.instance_id for i in sorted(unsorted)] == [
        "a/replica-2",
        "a/replica-10",
        "b/replica-0",
    ]


@pytest.mark.parametrize("shard", ["", ".", "..", "a/b", "a\\b", "a\x00b", None, 3])
def test_a_shard_name_must_be_one_safe_path_component(shard: object) -> None:
    """A shard that would escape or split the directory is refused."""
    with pytest.raises(ValueError, match="shard_name"):
        GymCheckpointInstance(shard, 0)  # type: ignore[arg-type]


@pytest.mark.parametrize("replica", [-1, True, 1.0, "1", None])
def test_a_replica_index_must_be_a_non_negative_integer(replica: object) -> None:
    """Negative, bool, float or string replica indices are refused."""
    with pytest.raises(ValueError, match="replica_index"):
        GymCheckpointInstance("s", replica)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "instance_id",
    [
        "s",
        "s/replica-",
        "s/replica-01",
        "s/replica--1",
        "s/replica-1x",
        "s/replica-+1",
        "s/replica- 1",
        "s/replica-\u0663",  # an Arabic-Indic three: a digit, not an ASCII one
        "/replica-1",
        "a/b/replica-1",
        "s/rep-1",
    ],
)
def test_parse_refuses_anything_instance_id_does_not_produce(instance_id: str) -> None:
    """Only the canonical ``<shard>/replica-<i>`` spelling parses."""
    with pytest.raises(ValueError):
        GymCheckpointInstance.parse(instance_id)


def test_the_instance_id_is_made_once_and_survives_pickling_and_replace() -> None:
    """The stored id is the shard and replica's; a pickled copy keeps it, replace remakes it."""
    import dataclasses
    import pickle

    instance = GymCheckpointInstance("math", 2)
    copy = pickle.loads(pickle.dumps(instance))
    assert copy == instance and copy.instance_id == "math/replica-2"
    moved = dataclasses.replace(instance, replica_index=7)
    assert moved.instance_id == "math/replica-7"
    assert repr(instance) == "GymCheckpointInstance(shard_name='math', replica_index=2)"
