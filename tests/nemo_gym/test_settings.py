"""Tests of the secrets and settings a hosted server process reads."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from envckpt.nemo_gym.settings import (
    TokenUnavailable,
    checkpoint_root,
    control_token,
    envckpt_block,
    expose_docs,
    read_token_file,
    staging_token,
    write_token_file,
)

SECRET = "s3cret-0123456789ab"


def test_token_from_the_environment_wins() -> None:
    """A token in the environment is used as is."""
    env = {"ENVCKPT_GYM_TOKEN": SECRET, "ENVCKPT_GYM_TOKEN_FILE": "/nonexistent"}
    assert control_token(env) == SECRET


def test_token_from_an_owner_only_file(tmp_path: Path) -> None:
    """The token file is written owner-only and read back."""
    path = write_token_file(tmp_path / "token", SECRET + "\n")
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert control_token({"ENVCKPT_GYM_TOKEN_FILE": str(path)}) == SECRET
    assert staging_token({"ENVCKPT_STAGING_TOKEN_FILE": str(path)}) == SECRET


def test_a_token_under_16_characters_is_refused(tmp_path: Path) -> None:
    """A short secret, from the environment or a file, is no token at all."""
    with pytest.raises(TokenUnavailable, match="at least 16"):
        control_token({"ENVCKPT_GYM_TOKEN": "abc"})
    path = write_token_file(tmp_path / "token", "x" * 15)
    with pytest.raises(TokenUnavailable, match="at least 16"):
        staging_token({"ENVCKPT_STAGING_TOKEN_FILE": str(path)})


def test_the_checkpoint_root_comes_from_the_environment_or_the_block() -> None:
    """ENVCKPT_CHECKPOINT_ROOT wins over the block; neither, or a relative path, is refused."""
    block = {"checkpoint_root": "/from/block"}
    assert checkpoint_root(block, {}) == Path("/from/block")
    assert checkpoint_root(block, {"ENVCKPT_CHECKPOINT_ROOT": "/from/env"}) == Path("/from/env")
    with pytest.raises(ValueError, match="ENVCKPT_CHECKPOINT_ROOT"):
        checkpoint_root({}, {})
    with pytest.raises(ValueError, match="absolute"):
        checkpoint_root({"checkpoint_root": "relative"}, {})


def test_docs_are_exposed_only_on_request() -> None:
    """Only ENVCKPT_EXPOSE_DOCS=1 keeps FastAPI's docs."""
    assert not expose_docs({}) and not expose_docs({"ENVCKPT_EXPOSE_DOCS": "yes"})
    assert expose_docs({"ENVCKPT_EXPOSE_DOCS": "1"})


def test_a_file_others_can_read_is_refused(tmp_path: Path) -> None:
    """A group- or world-readable token file is refused, as is an empty one."""
    path = write_token_file(tmp_path / "token", "s3cret")
    os.chmod(path, 0o640)
    with pytest.raises(TokenUnavailable, match="chmod 600"):
        read_token_file(path)
    empty = write_token_file(tmp_path / "empty", "")
    with pytest.raises(TokenUnavailable, match="empty"):
        read_token_file(empty)


def test_no_token_configured() -> None:
    """Without either variable the process refuses to start its control routes."""
    with pytest.raises(TokenUnavailable, match="ENVCKPT_GYM_TOKEN"):
        control_token({})


def test_envckpt_block_from_plain_and_omegaconf_configs() -> None:
    """The config's envckpt block reads the same from a dict and from a resolved DictConfig."""
    raw = {"audit": "/a", "envckpt": {"audit_dir": "${audit}", "scripted_policy": ["p"]}}
    assert envckpt_block(OmegaConf.create(raw)) == {"audit_dir": "/a", "scripted_policy": ["p"]}
    assert envckpt_block({"envckpt": {"x": 1}}) == {"x": 1}
    assert envckpt_block({}) == {}
    assert envckpt_block(None) == {}
