"""Optional extras: a clear error naming the extra to install, instead of a bare import failure.

fastapi = require("fastapi", extra="http")    # MissingExtra if not installed
"""

from __future__ import annotations

import importlib
from types import ModuleType

EXTRAS = {
    "http": ("fastapi", "uvicorn", "orjson"),
    "ray": ("ray",),
    "gym": ("nemo_gym",),
    "prometheus": ("prometheus_client",),
    "otel": ("opentelemetry",),
    "report": ("matplotlib",),
}


class MissingExtra(ImportError):
    """An optional dependency is not installed; the message says which extra brings it."""

    def __init__(self, module: str, extra: str) -> None:
        super().__init__(
            f"{module} is not installed; it comes with envckpt's {extra!r} extra: "
            f"pip install 'envckpt[{extra}]' (or 'envckpt[all]')",
            name=module,
        )
        self.module = module
        self.extra = extra

    def __reduce__(self) -> tuple[type[MissingExtra], tuple[str, str]]:
        return (MissingExtra, (self.module, self.extra))


def require(module: str, *, extra: str) -> ModuleType:
    """Import ``module``, or raise ``MissingExtra`` naming ``extra``."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        if error.name is not None and error.name.split(".")[0] != module.split(".")[0]:
            raise  # the module is there; something it needs is broken: not ours to rename
        raise MissingExtra(module, extra) from error


def missing_extra(error: ModuleNotFoundError) -> MissingExtra | None:
    """The extra a failed import belongs to, if it is one of envckpt's optional modules."""
    top = (error.name or "").split(".")[0]
    for extra, modules in EXTRAS.items():
        if top in modules:
            return MissingExtra(top, extra)
    return None
