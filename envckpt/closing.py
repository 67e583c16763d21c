"""``with`` for the objects that have ``close()``: one mixin instead of a copy in each::

    class SqliteDataPlane(Closeable):
        def close(self) -> None: ...

    with SqliteDataPlane(path) as plane:   # closed on leaving, error or not
        ...

``envckpt.http.closing.AsyncCloseable`` is the same for ``aclose()`` and ``async with``.
"""

from __future__ import annotations

from types import TracebackType
from typing import Self


class Closeable:
    """Gives a class with ``close()`` the context manager protocol."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
