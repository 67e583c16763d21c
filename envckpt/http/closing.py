"""``async with`` for the HTTP clients: one mixin instead of a copy in each."""

from __future__ import annotations

from types import TracebackType
from typing import Self


class AsyncCloseable:
    """Gives a class with ``aclose()`` the async context manager protocol."""

    async def aclose(self) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()
