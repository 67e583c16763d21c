"""Fingerprints of the nemo-gym 0.7.0 code envckpt's fork mirrors or relies on.

``simple_agent.py`` and ``gymnasium_agent.py`` fork upstream agent loops;
the adapters read server fields; the gates rely on the session middleware
and the rollout prefix. When the installed nemo-gym changes any of these,
``drifted()`` names it, and a test fails, so the fork is re-read against the
new upstream instead of silently diverging::

    drifted()   # {} when the installed nemo-gym matches what the fork mirrors
    # {"responses_api_agents.simple_agent.app:SimpleAgent._create_episode": ("7650...", "1b2c...")}

A fingerprint is the first 16 hex digits of the SHA-256 of the dedented source.
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
import linecache
import re
import textwrap

# target -> (fingerprint, what depends on it)
MIRRORED: dict[str, tuple[str, str]] = {
    "responses_api_agents.simple_agent.app:SimpleAgent._create_episode": (
        "7650d7c0d3ea8578",
        "simple_agent.SimpleAgentRecipe.turn mirrors one pass of its loop",
    ),
    "responses_api_agents.simple_agent.app:SimpleAgent.run": (
        "af56f0613277a00f",
        "simple_agent.SimpleAgentRecipe.seed and verify mirror it",
    ),
    "responses_api_agents.gymnasium_agent.app:GymnasiumAgent.run": (
        "9fdc5ff5b179bd46",
        "gymnasium_agent.GymnasiumAgentRecipe.seed and close mirror it",
    ),
    "responses_api_agents.gymnasium_agent.app:GymnasiumAgent._run_open_episode": (
        "ec9fbc9f62546456",
        "gymnasium_agent.GymnasiumAgentRecipe.turn mirrors one pass of its loop",
    ),
    "nemo_gym.server_utils:SimpleServer.get_session_middleware_key": (
        "8c3574ab86101497",
        "hosting keeps the class name because the cookie secret derives from it",
    ),
    "nemo_gym.server_utils:SimpleServer.setup_session_middleware": (
        "f43eec1fd357e48c",
        "resources.SessionGate sits inside the session middleware",
    ),
    "nemo_gym.server_utils:rollout_path_prefix": (
        "b9f21900b39ee318",
        "calls and the gates use the /ng-rollout/<key> prefix",
    ),
    "nemo_gym.rollout_correlation:RolloutContextMiddleware": (
        "9d06a11e8e4f810b",
        "resources.SessionGate reads the capture key it publishes",
    ),
    "resources_servers.example_session_state_mgmt.app:StatefulCounterResourcesServer": (
        "ceb0228499da9875",
        "adapters.CounterSessions reads session_id_to_counter",
    ),
    "resources_servers.example_multi_turn_gymnasium.app:ExampleMultiTurnEnv": (
        "f0a33c7b4358a046",
        "adapters.MultiTurnSessions reads session_turns",
    ),
    "resources_servers.blackjack.app:BlackjackEnv": (
        "ced77af629a95e0e",
        "adapters.BlackjackSessions reads session_state (hands and rng)",
    ),
    "resources_servers.gymnasium.base:GymnasiumServer": (
        "f94114cb67e2e9fe",
        "gymnasium sessions end at a terminated or truncated /step",
    ),
}


def resolve(target: str) -> object:
    module_name, _, qualname = target.partition(":")
    found: object = importlib.import_module(module_name)
    for part in qualname.split("."):
        found = getattr(found, part)
    return found


def source_of(found: object) -> str:
    """The source text ``inspect.getsource`` gives, found without ``ast.parse`` for classes.

    Python 3.11's ``inspect`` locates a class by parsing its whole module, and
    3.11.7's AST conversion keeps its recursion depth per interpreter, not
    per thread: a parse racing another thread's raises ``SystemError: AST
    constructor recursion depth mismatch`` (CPython gh-106905). A class is
    found here by its ``class`` line and cut with ``inspect.getblock``
    (tokenize only), which yields the same text for module-level classes.
    """
    if not inspect.isclass(found):
        return inspect.getsource(found)  # type: ignore[arg-type]
    filename = inspect.getsourcefile(found)
    if filename is None:
        raise OSError(f"no source file for {found!r}")
    lines = linecache.getlines(filename)
    header = re.compile(rf"^class\s+{re.escape(found.__name__)}\b")
    for number, line in enumerate(lines):
        if header.match(line):
            return "".join(inspect.getblock(lines[number:]))
    raise OSError(f"no module-level class {found.__name__} in {filename}")


def fingerprint(target: str) -> str:
    source = textwrap.dedent(source_of(resolve(target)))
    return hashlib.sha256(source.encode("utf-8")).hexdigest()[:16]


def drifted() -> dict[str, tuple[str, str]]:
    """target -> (expected, installed) for every mirrored piece whose source changed."""
    changed = {}
    for target, (expected, _) in MIRRORED.items():
        actual = fingerprint(target)
        if actual != expected:
            changed[target] = (expected, actual)
    return changed
