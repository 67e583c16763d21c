"""The hostile-input corpus: one row per request a participant server must refuse cleanly.

A row names the server (a participant, the judge, or the trainer's ``rows``
endpoint), the method and path, the body (JSON, raw bytes, or a function of
the ``Ctx`` for paths and deadlines, or a ``Declared``/``Streamed`` size sent
over a raw socket), the credentials, and the answer: status and envelope
code. Every row must leave every participant's ``status`` exactly as it was.
A new case is one line::

    c("prepare", J(deadline_ts=float("inf")), 422, "invalid_request", note="infinite deadline"),

``c`` targets a control route (on ``policy_model`` unless ``server=``),
``d`` a data route; ``J`` is a control body from the route's valid default
with fields changed (``OMIT`` drops one).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envckpt.participant.confinement import MAX_DIR_BYTES
from envckpt.protocol import (
    CHECKPOINT_ROUTE_PREFIX,
    MAX_ATTEMPT,
    MAX_PATH_LENGTH,
    MAX_ROLLOUT_ID_LENGTH,
)

MODEL, AGENT, TOOLS, JUDGE, ROWS = (
    "policy_model", "simple_agent", "tool_resources", "judge_model", "rows",
)  # fmt: skip
PARTICIPANTS = (MODEL, AGENT, TOOLS)
POSTS = ("prepare", "renew", "commit", "restore", "resume", "retire", "forget")
OMIT = object()
MIB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Ctx:
    """What a body may name: the servers' checkpoint root, a directory outside it, the time."""

    root: Path
    outside: Path
    now: float


@dataclass(frozen=True, slots=True)
class Declared:
    """A body of ``size`` bytes declared in Content-Length, of which nothing is sent."""

    size: int


@dataclass(frozen=True, slots=True)
class Streamed:
    """``size`` bytes of chunked body, never terminated."""

    size: int


Body = Any  # None, bytes, Declared, Streamed, or a function of Ctx returning JSON or bytes


@dataclass(frozen=True, slots=True)
class Case:
    server: str
    method: str
    path: str
    body: Body
    status: int
    code: str
    # control, rows, none, "header:<Authorization value>", or "twice:control" / "twice:rows"
    # (that right token, then a second Authorization header with a wrong one)
    auth: str = "control"
    content_type: str | None = "application/json"
    note: str = ""

    @property
    def id(self) -> str:
        route = self.path.rsplit("/", 1)[-1] or "root"
        words = [self.server, self.method, route, str(self.status), self.note]
        return "-".join(w.replace(" ", "_") for w in words if w)


def default_body(route: str, ctx: Ctx) -> dict[str, Any]:
    """A valid body for ``route``; in the idle phase each is refused without a change, or (resume,
    retire, forget) is the row's business to break."""
    base: dict[str, Any] = {"checkpoint_id": "hostile-1", "deadline_ts": ctx.now + 30}
    extra: dict[str, dict[str, Any]] = {
        "commit": {"checkpoint_dir": str(ctx.root / "c"), "episode_ids": None},
        "restore": {"checkpoint_dir": str(ctx.root / "missing"), "episode_ids": []},
        "retire": {"episode_ids": [{"rollout_id": "r", "attempt": 0}]},
        "forget": {"rollout_ids": ["r"]},
    }
    return {**base, **extra.get(route, {})}


@dataclass(frozen=True, slots=True)
class Template:
    """A control body: the route's default with ``changes`` (a callable value gets the Ctx)."""

    changes: Mapping[str, Any]

    def build(self, route: str, ctx: Ctx) -> dict[str, Any]:
        body = default_body(route, ctx)
        for key, value in self.changes.items():
            if value is OMIT:
                body.pop(key, None)
            else:
                body[key] = value(ctx) if callable(value) else value
        return body


def J(**changes: Any) -> Template:
    return Template(changes)


def c(route: str, body: Body, status: int, code: str, *, server: str = MODEL, **kw: Any) -> Case:
    method = kw.pop("method", "GET" if route == "status" else "POST")
    path = f"{CHECKPOINT_ROUTE_PREFIX}/{route}" if route else CHECKPOINT_ROUTE_PREFIX
    return Case(server, method, path, body, status, code, **kw)


def d(server: str, path: str, body: Body, status: int, code: str, **kw: Any) -> Case:
    return Case(server, kw.pop("method", "POST"), path, body, status, code, auth="none", **kw)


def in_root(*parts: str) -> Callable[[Ctx], str]:
    return lambda ctx: str(ctx.root.joinpath(*parts))


def at(seconds: float) -> Callable[[Ctx], float]:
    return lambda ctx: ctx.now + seconds


def long_dir(total_bytes: int) -> Callable[[Ctx], str]:
    """A directory under the root exactly ``total_bytes`` long (components of 200)."""

    def build(ctx: Ctx) -> str:
        path = str(ctx.root)
        while len(path) + 202 <= total_bytes:
            path += "/" + "d" * 200
        return path + "/" + "e" * (total_bytes - len(path) - 1)

    return build


def episodes(n: int, *, last: Any = None) -> Callable[[Ctx], list[Any]]:
    """``n`` well-formed episodes, the last one replaced by ``last`` if given."""

    def build(ctx: Ctx) -> list[Any]:
        items: list[Any] = [{"rollout_id": f"r{i}", "attempt": 0} for i in range(n)]
        if last is not None:
            items[-1] = last
        return items

    return build


def ep(rollout_id: Any = "r", attempt: Any = 0) -> dict[str, Any]:
    return {"rollout_id": rollout_id, "attempt": attempt}


# Codes: every refusal that is not about state is invalid_request, whatever its status.
U, NF, BAD, TOO = "unauthorized", "invalid_request", "invalid_request", "invalid_request"
PHASE, LATE, STATE = "invalid_phase", "deadline_exceeded", "invalid_checkpoint_state"
AUTH_VARIANTS: Mapping[str, str] = {
    "none": "none",
    "wrong": "header:Bearer wrong-token-0123456789",
    "lowercase": "header:bearer {control}",
    "basic": "header:Basic {control}",
    "suffixed": "header:Bearer {control}x",
    "prefix": "header:Bearer {control_prefix}",
    "spaced": "header:Bearer  {control}",
    "rows_token": "rows",
}
ROUTES = ("status", *POSTS)
GENERATE = {"episode": ep(), "turn": 0, "observation": "o"}


def auth_cases() -> list[Case]:
    """Every route of every participant without the right token: 401, before anything else."""
    rows = []
    for server in PARTICIPANTS:
        variants = AUTH_VARIANTS if server == MODEL else ("none", "wrong", "rows_token")
        for route in ROUTES:
            body = None if route == "status" else J()
            for name in variants:
                rows.append(c(route, body, 401, U, server=server, auth=AUTH_VARIANTS[name],
                              note=f"auth {name}"))  # fmt: skip
    return rows


def missing_field_cases() -> list[Case]:
    """Every required field of every POST route missing in turn: 422."""
    required = {"commit": ("checkpoint_dir",), "restore": ("checkpoint_dir", "episode_ids"),
                "retire": ("episode_ids",), "forget": ("rollout_ids",)}  # fmt: skip
    return [
        c(route, J(**{name: OMIT}), 422, BAD, note=f"no {name}")
        for route in POSTS
        for name in ("checkpoint_id", "deadline_ts", *required.get(route, ()))
    ]


# fmt: off
CASES: tuple[Case, ...] = (
    *auth_cases(),
    *(c(route, None if route == "status" else J(), 400, BAD, server=server, auth="twice:control",
        note="two Authorization headers") for server in PARTICIPANTS for route in ROUTES),
    c("nope", None, 400, BAD, auth="twice:control", method="GET",
      note="unknown route, two Authorization headers"),
    c("nope", None, 401, U, auth="none", method="GET", note="unknown route unauthenticated"),
    c("prepare", J(), 401, U, auth="none", content_type="text/plain", note="auth before type"),
    c("prepare", Declared(65 * MIB), 401, U, auth="none", note="auth before size"),
    c("prepare", b"not json", 401, U, auth="none", note="auth before parsing"),
    # ------------------------------------------------------------- methods, paths
    *(c(route, J(), 405, NF, server=server, method=method, note=f"{method} on {route}")
      for server in PARTICIPANTS
      for method, route in (("PUT", "prepare"), ("DELETE", "commit"), ("PATCH", "renew"),
                            ("OPTIONS", "resume"), ("GET", "commit"), ("POST", "status"))),
    *(c(route, None, 405, NF, server=server, method="HEAD", note="HEAD")
      for server in PARTICIPANTS for route in ("status", "prepare")),
    c("", None, 404, NF, method="GET", note="the prefix itself"),
    c("nope", None, 404, NF, method="GET", note="unknown route"),
    c("nope", J(), 404, NF, note="unknown route POST"),
    c("status/", None, 404, NF, method="GET", note="trailing slash"),
    c("STATUS", None, 404, NF, method="GET", note="case"),
    c("prepare/extra", J(), 404, NF, note="extra segment"),
    c("%2e%2e/status", None, 404, NF, method="GET", note="encoded dot segment"),
    # ------------------------------------------------------------- content types
    *(c("prepare", J(), 415, BAD, content_type=kind, note=f"type {kind}")
      for kind in (None, "text/plain", "application/x-www-form-urlencoded",
                   "multipart/form-data; boundary=b", "application/xml", "text/json")),
    c("commit", J(), 415, BAD, server=TOOLS, content_type="text/plain", note="type on tools"),
    # ------------------------------------------------------------- body syntax
    c("prepare", b"", 422, BAD, note="empty"),
    c("prepare", b"   ", 422, BAD, note="blank"),
    c("prepare", b"not json", 422, BAD, note="not JSON"),
    c("prepare", b"[]", 422, BAD, note="array"),
    c("prepare", b'"text"', 422, BAD, note="string"),
    c("prepare", b"null", 422, BAD, note="null"),
    c("prepare", b"42", 422, BAD, note="number"),
    c("prepare", b'{"checkpoint_id": "h", "deadline_ts": NaN}', 422, BAD, note="NaN"),
    c("prepare", b'{"checkpoint_id": "h", "deadline_ts": Infinity}', 422, BAD, note="Infinity"),
    c("prepare", b'{"checkpoint_id": "h", "deadline_ts": -Infinity}', 422, BAD, note="-Infinity"),
    c("prepare", b'{"checkpoint_id": "h", "deadline_ts": 1e5000}', 422, BAD, note="1e5000"),
    c("prepare", b'{"checkpoint_id": "h", "deadline_ts": 1' + b"0" * 5000 + b"}", 422, BAD,
      note="5000 digits"),
    c("prepare", b'{"checkpoint_id": "a", "checkpoint_id": "b", "deadline_ts": 1}', 422, BAD,
      note="duplicate key"),
    c("prepare", b'{"checkpoint_id": "h\xff\xfe", "deadline_ts": 1}', 422, BAD,
      note="invalid UTF-8"),
    c("prepare", b"\xef\xbb\xbf{}", 422, BAD, note="byte order mark"),
    c("prepare", b'{"checkpoint_id": "h"} {"x": 1}', 422, BAD, note="two values"),
    c("prepare", b'{"checkpoint_id": "h", "deadline_ts": 1', 422, BAD, note="truncated"),
    c("prepare", b"[" * 100_000 + b"]" * 100_000, 422, BAD, note="deep array"),
    c("prepare", b'{"a":' * 50_000 + b"1" + b"}" * 50_000, 422, BAD, note="deep object"),
    c("retire", J(episode_ids=[[[[ep()]]]]), 422, BAD, note="nested lists"),
    # ------------------------------------------------------------- sizes
    c("prepare", Declared(65 * MIB), 413, TOO, note="65 MiB declared"),
    c("commit", Streamed(64 * MIB + 1), 413, TOO, server=AGENT, note="64 MiB + 1 streamed"),
    c("prepare", J(checkpoint_id="c" * 10 * MIB), 422, BAD, note="10 MB id"),
    c("forget", J(rollout_ids=["r" * 10 * MIB]), 422, BAD, note="10 MB rollout id"),
    c("commit", J(checkpoint_dir=lambda ctx: str(ctx.root) + "/" + "d" * 10 * MIB), 422, BAD,
      note="10 MB directory"),
    c("retire", J(episode_ids=episodes(100_000, last=ep("../x"))), 422, BAD,
      note="100k episodes, the last bad"),
    c("forget", J(rollout_ids=[f"r{i}" for i in range(100_000)] + [""]), 422, BAD,
      note="100k rollout ids, the last empty"),
    # ------------------------------------------------------------- fields
    *missing_field_cases(),
    *(c(route, J(surprise=1), 422, BAD, note="unknown field") for route in POSTS),
    c("prepare", J(deadline_ts="123.5"), 422, BAD, note="deadline as text"),
    c("prepare", J(deadline_ts=True), 422, BAD, note="deadline as bool"),
    c("prepare", J(deadline_ts=None), 422, BAD, note="deadline null"),
    c("prepare", J(deadline_ts=[1]), 422, BAD, note="deadline as array"),
    c("prepare", J(checkpoint_id=7), 422, BAD, note="id as number"),
    c("prepare", J(checkpoint_id={"id": "x"}), 422, BAD, note="id as object"),
    c("commit", J(episode_ids={"rollout_id": "r"}), 422, BAD, note="object for list"),
    c("commit", J(stop="yes"), 422, BAD, note="stop as text"),
    c("commit", J(stop=1), 422, BAD, note="stop as number"),
    c("commit", J(checkpoint_dir=["/x"]), 422, BAD, note="directory as array"),
    c("retire", J(episode_ids=[]), 422, BAD, note="empty episodes"),
    c("retire", J(episode_ids=[{"rollout_id": "r"}]), 422, BAD, note="no attempt"),
    c("retire", J(episode_ids=[{"attempt": 0}]), 422, BAD, note="no rollout id"),
    c("retire", J(episode_ids=[{**ep(), "x": 1}]), 422, BAD, note="episode extra key"),
    c("retire", J(episode_ids=[ep(attempt=-1)]), 422, BAD, note="negative attempt"),
    c("retire", J(episode_ids=[ep(attempt=1.5)]), 422, BAD, note="fractional attempt"),
    c("retire", J(episode_ids=[ep(attempt="0")]), 422, BAD, note="attempt as text"),
    c("retire", J(episode_ids=[ep(attempt=True)]), 422, BAD, note="attempt as bool"),
    c("retire", J(episode_ids=[["r", 0]]), 422, BAD, note="array for episode"),
    c("retire", J(episode_ids=["r"]), 422, BAD, note="string for episode"),
    c("forget", J(rollout_ids="r"), 422, BAD, note="string for list"),
    c("forget", J(rollout_ids=[]), 422, BAD, note="empty rollout ids"),
    c("forget", J(rollout_ids=[None]), 422, BAD, note="null rollout id"),
    c("restore", J(episode_ids=None), 422, BAD, note="null restore scope"),
    # ------------------------------------------------------------- ids and limits
    c("renew", J(checkpoint_id="c" * 128), 409, PHASE, note="id at 128"),
    c("renew", J(checkpoint_id="c" * 129), 422, BAD, note="id at 129"),
    c("commit", J(episode_ids=[ep("r" * MAX_ROLLOUT_ID_LENGTH)]), 409, PHASE,
      note="rollout id at the limit"),
    c("commit", J(episode_ids=[ep("r" * (MAX_ROLLOUT_ID_LENGTH + 1))]), 422, BAD,
      note="rollout id past the limit"),
    c("commit", J(episode_ids=[ep(attempt=MAX_ATTEMPT)]), 409, PHASE, note="attempt at max"),
    c("commit", J(episode_ids=[ep(attempt=MAX_ATTEMPT + 1)]), 422, BAD, note="attempt past max"),
    c("commit", J(checkpoint_dir=long_dir(MAX_DIR_BYTES)), 409, PHASE,
      note="directory at the byte limit"),
    c("commit", J(checkpoint_dir=long_dir(MAX_DIR_BYTES + 1)), 422, BAD,
      note="directory past the byte limit"),
    c("commit", J(checkpoint_dir=long_dir(MAX_PATH_LENGTH + 1)), 422, BAD,
      note="directory past the wire limit"),
    c("commit", J(checkpoint_dir=in_root("n" * 255)), 409, PHASE, note="component at 255"),
    c("commit", J(checkpoint_dir=in_root("n" * 256)), 422, BAD, note="component at 256"),
    *(c("prepare", J(checkpoint_id=bad), 422, BAD, note=f"checkpoint id {bad!r}")
      for bad in ("../x", "a/b", ".hidden", "-x", "x\x00", "x\n", "", " x", "ä")),
    *(c("forget", J(rollout_ids=[bad]), 422, BAD, note=f"rollout id {bad!r}")
      for bad in ("../../etc/passwd", "r-a1", "a/b", "x\x00", ".r", "r r")),
    # ------------------------------------------------------------- deadlines
    c("prepare", J(deadline_ts=1e308), 422, BAD, note="deadline 1e308"),
    c("prepare", J(deadline_ts=at(3601)), 422, BAD, note="deadline past the longest lease"),
    c("renew", J(deadline_ts=at(3500)), 409, PHASE, note="deadline within the longest lease"),
    c("resume", J(deadline_ts=1e308), 422, BAD, note="resume deadline 1e308"),
    c("prepare", J(deadline_ts=at(-5)), 409, LATE, note="past deadline"),
    c("prepare", J(deadline_ts=-1e308), 409, LATE, note="ancient deadline"),
    c("prepare", J(deadline_ts=0), 409, LATE, note="deadline zero"),
    c("renew", J(deadline_ts=at(-5)), 409, LATE, note="renew past deadline"),
    c("commit", J(deadline_ts=at(-5)), 409, LATE, note="commit past deadline"),
    # ------------------------------------------------------------- confinement
    *(c(route, J(checkpoint_dir=bad), 422, BAD, server=server, note=f"directory {bad!r}")
      for route, server in (("commit", MODEL), ("restore", AGENT))
      for bad in ("/", "/etc", "relative", "./x", "~/x", "", "\\\\server\\share")),
    *(c("commit", J(checkpoint_dir=make), 422, BAD, server=TOOLS, note=note)
      for note, make in (
          ("outside", lambda ctx: str(ctx.outside)),
          ("sibling sharing the prefix", lambda ctx: str(ctx.root) + "-other"),
          ("dot-dot out", lambda ctx: str(ctx.root) + "/../outside"),
          ("dot-dot inside", lambda ctx: str(ctx.root) + "/a/../b"),
          ("doubled slash", lambda ctx: str(ctx.root) + "//x"),
          ("trailing slash", lambda ctx: str(ctx.root) + "/x/"),
          ("NUL", lambda ctx: str(ctx.root) + "/x\x00y"),
          ("newline", lambda ctx: str(ctx.root) + "/x\ny"),
          ("escape sequence", lambda ctx: str(ctx.root) + "/x\x1b[2J"),
          ("bidi override", lambda ctx: str(ctx.root) + "/x\u202ey"),
          ("line separator", lambda ctx: str(ctx.root) + "/x\u2028y"),
          ("symlink out", in_root("escape")),
          ("through a symlink out", in_root("escape", "deeper")),
          ("planted gym symlink", in_root("planted")),
      )),
    c("commit", lambda ctx: b'{"checkpoint_id": "h", "deadline_ts": %f, "checkpoint_dir": '
      b'"%s/x\\ud800"}' % (ctx.now + 30, str(ctx.root).encode()), 422, BAD, server=TOOLS,
      note="lone surrogate"),
    c("commit", J(checkpoint_dir=in_root("inside", "s")), 409, PHASE,
      note="symlink staying inside"),
    c("restore", J(checkpoint_dir=in_root("escape")), 422, BAD, server=TOOLS,
      note="restore through a symlink out"),
    c("restore", J(checkpoint_dir=in_root("inside")), 422, STATE, server=TOOLS,
      note="restore through a symlink inside, nothing there"),
    c("restore", J(checkpoint_dir=in_root("planted")), 422, BAD, server=AGENT,
      note="restore through a planted gym symlink"),
    # ------------------------------------------------------------- data routes
    *(d(server, path, b"not json", 422, BAD, note="not JSON")
      for server, path in ((MODEL, "/generate"), (TOOLS, "/call"), (AGENT, "/run"),
                           (JUDGE, "/generate"), (MODEL, "/finish"), (TOOLS, "/finish"))),
    *(d(server, path, Declared(16 * MIB + 1), 413, TOO, note="16 MiB + 1 declared")
      for server, path in ((MODEL, "/generate"), (TOOLS, "/call"), (AGENT, "/run"),
                           (JUDGE, "/generate"))),
    d(JUDGE, "/generate", Streamed(16 * MIB + 1), 413, TOO, note="16 MiB + 1 streamed"),
    *(d(server, path, GENERATE, 415, BAD, content_type=kind, note=f"type {kind}")
      for server, path in ((MODEL, "/generate"), (AGENT, "/run"), (JUDGE, "/generate"))
      for kind in ("text/plain", None)),
    *(d(server, path, None, 405, NF, method="GET", note="GET")
      for server, path in ((MODEL, "/generate"), (TOOLS, "/call"), (AGENT, "/run"),
                           (JUDGE, "/generate"))),
    *(d(server, path, None, 404, NF, method="GET", note=f"path {path}")
      for server in (MODEL, JUDGE)
      for path in ("/docs", "/redoc", "/openapi.json", "/docs/oauth2-redirect", "/", "/nope")),
    d(MODEL, "/generate", b"[]", 422, BAD, note="array"),
    d(MODEL, "/generate", {"turn": 0, "observation": "o"}, 400, "rollout_id_required",
      note="no episode"),
    d(MODEL, "/generate", {**GENERATE, "episode": ep("../x")}, 422, BAD, note="traversal id"),
    d(MODEL, "/generate", {**GENERATE, "episode": ep(attempt=-1)}, 422, BAD,
      note="negative attempt"),
    d(MODEL, "/generate", {**GENERATE, "extra": 1}, 422, BAD, note="unknown field"),
    d(TOOLS, "/call", {"episode": ep(), "turn": -1, "action": "a"}, 422, BAD,
      note="negative turn"),
    d(AGENT, "/run", {"episode": ep(), "task": []}, 422, BAD, note="array task"),
    d(MODEL, "/generate", b'{"episode": {"rollout_id": "r", "attempt": 0}, "turn": 1e5000}',
      422, BAD, note="1e5000"),
    d(MODEL, "/generate", b'{"episode": 1, "episode": 2}', 422, BAD, note="duplicate key"),
    # ------------------------------------------------------------- rows endpoint
    *(Case(ROWS, "POST", "/rows", {"capture_key": "r", "staging_key": "r/t0", "payload": "p"},
           401, U, auth=auth, note=f"rows auth {auth}")
      for auth in ("none", "control", "header:Bearer wrong-token-0123456789")),
    Case(ROWS, "POST", "/rows", {"capture_key": "r", "staging_key": "r/t0", "payload": "p"},
         400, BAD, auth="twice:rows", note="rows two Authorization headers"),
    Case(ROWS, "POST", "/rows", Declared(16 * MIB + 1), 413, TOO, auth="rows", note="rows size"),
    Case(ROWS, "POST", "/rows", b"not json", 422, BAD, auth="rows", note="rows not JSON"),
    Case(ROWS, "POST", "/rows", {"capture_key": "r"}, 422, BAD, auth="rows",
         note="rows missing fields"),
    Case(ROWS, "POST", "/rows", {"capture_key": "r", "staging_key": "k", "payload": 1}, 422,
         BAD, auth="rows", note="rows payload not text"),
    Case(ROWS, "POST", "/rows", {"capture_key": "r"}, 415, BAD, auth="rows",
         content_type="text/plain", note="rows type"),
    Case(ROWS, "GET", "/rows", None, 405, NF, auth="rows", note="rows GET"),
)
# fmt: on

_ids = [case.id for case in CASES]
assert len(set(_ids)) == len(_ids), sorted({i for i in _ids if _ids.count(i) > 1})


def resolve_body(case: Case, ctx: Ctx) -> Any:
    """The row's body with its functions applied (JSON value, bytes, or a size marker)."""
    body = case.body
    if isinstance(body, Template):
        return body.build(case.path.rsplit("/", 1)[-1], ctx)
    if callable(body):
        return body(ctx)
    return body
