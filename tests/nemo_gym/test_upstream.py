"""Tests that the nemo-gym code the fork mirrors is the code installed."""

from __future__ import annotations

import pytest

pytest.importorskip("nemo_gym")

from envckpt.nemo_gym import upstream


def test_installed_nemo_gym_matches_the_fork() -> None:
    """Every mirrored upstream piece has the source the fork was written against."""
    changed = upstream.drifted()
    assert not changed, (
        "nemo-gym changed code envckpt's fork mirrors; re-read it and update the fork, "
        "then the fingerprints: "
        + "; ".join(
            f"{t} ({upstream.MIRRORED[t][1]}): {old} -> {new}" for t, (old, new) in changed.items()
        )
    )


def test_drift_is_detected(monkeypatch: pytest.MonkeyPatch) -> None:
    """A changed source (here: a recorded fingerprint that no longer matches) is reported."""
    target = "responses_api_agents.simple_agent.app:SimpleAgent._create_episode"
    monkeypatch.setitem(upstream.MIRRORED, target, ("0000000000000000", "tampered"))
    assert set(upstream.drifted()) == {target}


@pytest.mark.parametrize("target", sorted(upstream.MIRRORED))
def test_source_is_what_inspect_gives(target: str) -> None:
    """Classes are cut without ast.parse, yet the text is inspect.getsource's, byte for byte."""
    import inspect

    found = upstream.resolve(target)
    assert upstream.source_of(found) == inspect.getsource(found)  # type: ignore[arg-type]


def test_a_class_not_at_module_level_is_refused() -> None:
    """A class the module does not define at its top level has no source to cut: OSError."""

    class Local:
        pass

    with pytest.raises(OSError, match="no module-level class Local"):
        upstream.source_of(Local)
