"""Tests for envckpt.extras: a missing optional dependency names the extra that brings it."""

from __future__ import annotations

import pickle
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from envckpt.extras import EXTRAS, MissingExtra, missing_extra, require


def test_require_returns_an_installed_module() -> None:
    """An importable module comes back as the module itself."""
    assert require("json", extra="none") is sys.modules["json"]


def test_require_names_the_extra_of_a_module_that_is_not_installed() -> None:
    """A missing module raises MissingExtra (an ImportError) saying what to pip install."""
    with pytest.raises(MissingExtra) as caught:
        require("surely_not_installed_module", extra="nope")
    error = caught.value
    assert isinstance(error, ImportError)
    assert (error.module, error.extra) == ("surely_not_installed_module", "nope")
    assert error.name == "surely_not_installed_module"
    assert "pip install 'envckpt[nope]'" in str(error) and "'envckpt[all]'" in str(error)
    assert isinstance(error.__cause__, ModuleNotFoundError)


def test_a_missing_submodule_of_the_same_package_is_a_missing_extra() -> None:
    """``pkg.sub`` that is not there is still the package's extra to install."""
    with pytest.raises(MissingExtra):
        require("json.no_such_submodule", extra="x")


@pytest.fixture
def broken_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An installed package whose own import fails on a dependency that is missing."""
    name = "envckpt_test_broken_pkg"
    package = tmp_path / name
    package.mkdir()
    (package / "__init__.py").write_text("import envckpt_test_absent_dependency\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def test_a_broken_installed_module_is_not_renamed_a_missing_extra(broken_package: str) -> None:
    """The module is there but something it needs is not: the original error passes through."""
    with pytest.raises(ModuleNotFoundError) as caught:
        require(broken_package, extra="x")
    assert not isinstance(caught.value, MissingExtra)
    assert caught.value.name == "envckpt_test_absent_dependency"


@pytest.mark.parametrize(
    ("module", "extra"),
    [(module, extra) for extra, modules in EXTRAS.items() for module in modules],
)
def test_missing_extra_maps_each_optional_module_to_its_extra(module: str, extra: str) -> None:
    """A failed import of an optional module, or of one of its submodules, names its extra."""
    for name in (module, f"{module}.internals"):
        found = missing_extra(ModuleNotFoundError("x", name=name))
        assert found is not None and (found.module, found.extra) == (module, extra)


@pytest.mark.parametrize("name", ["numpy", "fastapis", None, ""])
def test_missing_extra_is_none_for_modules_no_extra_brings(name: str | None) -> None:
    """Any other module (or an unnamed failure) is not envckpt's to explain."""
    assert missing_extra(ModuleNotFoundError("x", name=name)) is None


def test_a_missing_extra_survives_pickle() -> None:
    """MissingExtra crosses process boundaries with its module, extra and message."""
    error = MissingExtra("ray", "ray")
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is MissingExtra
    assert (copy.module, copy.extra, str(copy)) == ("ray", "ray", str(error))
