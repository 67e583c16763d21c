"""Tests of the control routes hosted on real nemo-gym 0.7.0 servers, and of the capture-key codec.

Skipped when nemo-gym is not installed.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Any

import pytest

from helpers.examples import examples

pytest.importorskip("nemo_gym.episode_types")

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st
from nemo_gym.base_resources_server import (
    BaseResourcesServerConfig,
    BaseVerifyRequest,
    BaseVerifyResponse,
    SimpleResourcesServer,
)
from nemo_gym.base_responses_api_agent import (
    BaseResponsesAPIAgentConfig,
    SimpleResponsesAPIAgent,
)
from nemo_gym.base_responses_api_model import (
    BaseResponsesAPIModelConfig,
    SimpleResponsesAPIModel,
)
from nemo_gym.config_types import BaseServerConfig
from nemo_gym.episode_types import EpisodeId
from nemo_gym.global_config import GlobalConfigDictParser, get_first_server_config_dict
from nemo_gym.server_utils import ServerClient
from omegaconf import OmegaConf
from pydantic import ValidationError

from envckpt.coordination.coordinator import Coordinator
from envckpt.episodes import EnvironmentEpisode
from envckpt.http.client import HttpTransport, nemo_gym_server_urls
from envckpt.http.routes import mount_participant
from envckpt.http.serve import serve_many
from envckpt.ids import validate_rollout_id
from envckpt.participant.store import MANIFEST_NAME, participant_dir

from helpers.http_deployment import TOKEN, deadline, make_core, new_id
from helpers.nemo_gym_config import realistic_config

HOST = "127.0.0.1"


class PolicyModel(SimpleResponsesAPIModel):
    ray_enabled = False

    async def chat_completions(self, body: Any = None) -> Any:
        raise NotImplementedError

    async def responses(self, body: Any = None) -> Any:
        raise NotImplementedError


class Agent(SimpleResponsesAPIAgent):
    ray_enabled = False

    async def responses(self, body: Any = None) -> Any:
        raise NotImplementedError

    async def run(self, body: Any = None) -> Any:
        raise NotImplementedError


class Resources(SimpleResourcesServer):
    ray_enabled = False

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=1.0)


def server_client(config: dict[str, Any]) -> ServerClient:
    return ServerClient(
        head_server_config=BaseServerConfig(**config["head_server"]),
        global_config_dict=OmegaConf.create(config),
    )


def gym_config(ports: dict[str, int]) -> dict[str, Any]:
    """The global config nemo-gym would hand these servers, with the ports they got."""

    def entry(server_type: str, impl: str, name: str, **extra: Any) -> dict[str, Any]:
        inner = {"entrypoint": "app.py", "host": HOST, "port": ports.get(name, 1), **extra}
        return {server_type: {impl: inner}}

    return {
        "head_server": {"host": HOST, "port": ports.get("head_server", 1)},
        "dry_run": False,
        "policy_model": entry("responses_api_models", "test_model", "policy_model"),
        "simple_agent": entry("responses_api_agents", "test_agent", "simple_agent"),
        "tools": entry("resources_servers", "test_resources", "tools", domain="other"),
        "judge": entry("resources_servers", "test_judge", "judge", domain="other"),
    }


async def test_participants_on_nemo_gym_servers(tmp_path: Path) -> None:
    """discover -> prepare -> commit -> resume against control routes mounted on nemo-gym apps."""
    client = server_client(gym_config({}))

    def config(cls: type[Any], name: str, **extra: Any) -> Any:
        return cls(host=HOST, port=1, entrypoint="app.py", name=name, **extra)

    servers = {
        "policy_model": PolicyModel(
            config=config(BaseResponsesAPIModelConfig, "policy_model"), server_client=client
        ),
        "simple_agent": Agent(
            config=config(BaseResponsesAPIAgentConfig, "simple_agent"), server_client=client
        ),
        "tools": Resources(
            config=config(BaseResourcesServerConfig, "tools", domain="other"),
            server_client=client,
        ),
        # A nemo-gym server without control routes, like a judge: not a participant.
        "judge": Resources(
            config=config(BaseResourcesServerConfig, "judge", domain="other"),
            server_client=client,
        ),
    }
    kinds = {"policy_model": "model", "simple_agent": "agent", "tools": "resources"}
    cores = {name: make_core(name, kind) for name, kind in kinds.items()}
    apps = {name: server.setup_webserver() for name, server in servers.items()}
    for name, core in cores.items():
        mount_participant(apps[name], core, token=TOKEN, checkpoint_root=tempfile.gettempdir())

    ids = [EpisodeId(rollout_id="math-17"), EpisodeId(rollout_id="math-18", attempt=2)]
    wire = [episode_id.model_dump(mode="json") for episode_id in ids]
    assert wire == [
        {"rollout_id": "math-17", "attempt": 0},
        {"rollout_id": "math-18", "attempt": 2},
    ]
    episodes = [EnvironmentEpisode.from_wire(item) for item in wire]
    for core in cores.values():
        for episode in episodes:
            async with core.admit(episode):
                core.hooks.states[episode] = {"turns": 1}  # type: ignore[attr-defined]

    names = list(apps)
    async with serve_many([apps[name] for name in names]) as urls:
        ports = {name: int(url.rsplit(":", 1)[1]) for name, url in zip(names, urls, strict=True)}
        resolved = server_client(gym_config(ports))
        async with HttpTransport.from_server_client(resolved, token=TOKEN) as transport:
            assert transport.server_names() == ("judge", "policy_model", "simple_agent", "tools")
            coordinator = Coordinator(transport)
            participants = await coordinator.discover()
            assert [(m.server_name, m.kind) for m in participants.members] == [
                ("policy_model", "model"),
                ("simple_agent", "agent"),
                ("tools", "resources"),
            ]
            cid = new_id()
            result = await coordinator.prepare(participants, cid, deadline_ts=deadline())
            assert result.prepared
            replies = await coordinator.commit(
                participants, cid, str(tmp_path), result.continued(episodes), deadline_ts=deadline()
            )
            keys = sorted(episode_id.capture_key for episode_id in ids)
            for name, reply in replies.items():
                assert reply["episode_ids"] == keys
                manifest = participant_dir(tmp_path, kinds[name], name) / MANIFEST_NAME
                assert manifest.is_file()
            await coordinator.resume(participants, cid, deadline_ts=deadline())
            assert all(core.phase == "idle" for core in cores.values())
            # The nemo-gym routes still answer beside the control routes.
            async with httpx.AsyncClient() as raw:
                mode = await raw.get(f"{transport.base_url('tools')}/reverify_mode")
                assert mode.status_code == 200


def test_server_urls_match_nemo_gym() -> None:
    """The servers found, and their URLs, are the ones nemo-gym itself resolves."""
    config = OmegaConf.create(realistic_config())
    ours = nemo_gym_server_urls(config)
    instances = GlobalConfigDictParser().filter_for_server_instance_configs(config)
    assert sorted(ours) == sorted(instance.name for instance in instances)
    for name, url in ours.items():
        inner = get_first_server_config_dict(config, name)
        assert url == f"http://{inner.host}:{inner.port}"
    # Unset settings are skipped and interpolated hosts are resolved, as nemo-gym reads them.
    raw = realistic_config()
    raw["hf_token"] = "???"
    raw["policy_model"]["responses_api_models"]["vllm_model"]["host"] = "${default_host}"
    assert nemo_gym_server_urls(OmegaConf.create(raw)) == ours


def _accepts(rollout_id: str) -> tuple[bool, bool]:
    try:
        EpisodeId(rollout_id=rollout_id)
        theirs = True
    except ValidationError:
        theirs = False
    try:
        validate_rollout_id(rollout_id)
        ours = True
    except ValueError:
        ours = False
    return ours, theirs


ROLLOUT_IDS = st.from_regex(re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,60}"), fullmatch=True)
SUFFIXED = st.builds(
    lambda base, n: f"{base}-a{n}", ROLLOUT_IDS, st.integers(min_value=0, max_value=10**6)
)
ANY_TEXT = st.text(alphabet=st.sampled_from("aZ0._-/ \n\té"), max_size=12)


@settings(max_examples=examples(300), deadline=None)
@given(
    rollout_id=st.one_of(ROLLOUT_IDS, SUFFIXED, ANY_TEXT.filter(lambda s: not s.endswith("\n"))),
    attempt=st.integers(min_value=0, max_value=10**9),
)
def test_capture_keys_agree_with_episode_id(rollout_id: str, attempt: int) -> None:
    """Both codecs accept the same rollout ids and derive and parse the same capture keys."""
    ours, theirs = _accepts(rollout_id)
    assert ours == theirs, rollout_id
    if re.search(r"-a[1-9][0-9]*\Z", rollout_id):
        assert not ours  # the reserved suffix
    if not ours:
        return
    episode = EnvironmentEpisode(rollout_id, attempt)
    theirs_id = EpisodeId(rollout_id=rollout_id, attempt=attempt)
    assert episode.capture_key == theirs_id.capture_key
    assert EnvironmentEpisode.from_capture_key(theirs_id.capture_key) == episode
    assert EnvironmentEpisode.from_wire(theirs_id.model_dump(mode="json")) == episode
    parse = getattr(EpisodeId, "from_capture_key", None)
    if parse is not None:  # not in nemo-gym 0.7.0
        assert parse(episode.capture_key) == theirs_id


def test_reserved_suffix_examples() -> None:
    """-a<N> with N >= 1 is reserved on both sides; -a0, -a01 and inner -aN are ordinary."""
    for reserved in ("x-a1", "task-7-a12", "a-a1-a2"):
        assert _accepts(reserved) == (False, False), reserved
    for ordinary in ("x-a0", "x-a01", "x-a1b", "x-a1.2", "xa1", "x-b1"):
        assert _accepts(ordinary) == (True, True), ordinary
        assert EnvironmentEpisode.from_capture_key(ordinary) == EnvironmentEpisode(ordinary, 0)
    assert EpisodeId(rollout_id="x-a0", attempt=3).capture_key == "x-a0-a3"
    assert EnvironmentEpisode.from_capture_key("x-a0-a3") == EnvironmentEpisode("x-a0", 3)


def test_trailing_newline_is_refused_like_nemo_gym() -> None:
    """A rollout id ending in a newline is refused by both codecs."""
    assert _accepts("task-1\n") == (False, False)


def test_long_rollout_ids_are_accepted_like_nemo_gym() -> None:
    """Neither codec limits a rollout id's length (request bodies are bounded instead)."""
    assert _accepts("r" * 5000) == (True, True)
