"""Tests for envckpt.http.tokens: strong tokens, from the environment or an owner-only file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from envckpt.http.tokens import (
    MIN_TOKEN_LENGTH,
    TokenUnavailable,
    new_token,
    read_token_file,
    require_strong_token,
    secret,
    write_token_file,
)

GOOD = "a-good-token-0123456789"


def test_new_tokens_are_long_and_distinct() -> None:
    """Fresh tokens pass the strength check and never repeat."""
    tokens = {new_token() for _ in range(50)}
    assert len(tokens) == 50
    for token in tokens:
        assert require_strong_token(token) == token and len(token) >= 40


@pytest.mark.parametrize(
    "token", ["", "t", "x" * (MIN_TOKEN_LENGTH - 1), " " + GOOD, GOOD + "\n", "a b" * 8, None, 42]
)
def test_short_blank_or_non_string_tokens_are_refused(token: object) -> None:
    """Under 16 characters, whitespace or control characters, or not a string: ValueError."""
    with pytest.raises(ValueError):
        require_strong_token(token, what="test token")


def test_exactly_the_minimum_is_accepted() -> None:
    """16 printable characters are enough."""
    assert MIN_TOKEN_LENGTH == 16
    assert require_strong_token("x" * 16) == "x" * 16


def test_secret_prefers_the_variable_then_the_file(tmp_path: Path) -> None:
    """The variable wins; else the owner-only file; a short secret from either is refused."""
    path = write_token_file(tmp_path / "t", GOOD + "\n")
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert secret("V", "F", {"V": GOOD, "F": "/nonexistent"}) == GOOD
    assert secret("V", "F", {"F": str(path)}) == GOOD
    with pytest.raises(TokenUnavailable, match="set V or F"):
        secret("V", "F", {})
    with pytest.raises(TokenUnavailable, match="at least 16"):
        secret("V", "F", {"V": "short"})


def test_a_token_file_others_can_read_is_refused(tmp_path: Path) -> None:
    """Group or other permissions, or an empty file: TokenUnavailable."""
    path = write_token_file(tmp_path / "t", GOOD)
    for mode in (0o640, 0o604, 0o620):
        os.chmod(path, mode)
        with pytest.raises(TokenUnavailable, match="chmod 600"):
            read_token_file(path)
    os.chmod(path, 0o600)
    assert read_token_file(path) == GOOD
    with pytest.raises(TokenUnavailable, match="empty"):
        read_token_file(write_token_file(tmp_path / "empty", ""))
