"""Tests of adding envckpt's participant to nemo-gym server classes."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import httpx
import pytest

pytest.importorskip("responses_api_agents.simple_agent.app")

from nemo_gym.base_responses_api_agent import SimpleResponsesAPIAgent
from resources_servers.example_session_state_mgmt.app import StatefulCounterResourcesServer
from responses_api_agents.gymnasium_agent.app import GymnasiumAgent
from responses_api_agents.simple_agent.app import SimpleAgent
from responses_api_models.vllm_model.app import VLLMModel

from envckpt.http.serve import serve
from envckpt.nemo_gym.hosting import checkpointable, kind_of, same_name_subclass

from helpers.http_deployment import TOKEN
from helpers.nemo_gym_servers import build, hosted


def test_the_subclass_keeps_the_base_class_identity() -> None:
    """Name, qualname and module stay, so nemo-gym's cookie secret is unchanged; Ray is off."""
    for cls in (StatefulCounterResourcesServer, SimpleAgent, GymnasiumAgent, VLLMModel):
        sub = checkpointable(cls, token=TOKEN)
        assert (sub.__name__, sub.__qualname__, sub.__module__) == (
            cls.__name__,
            cls.__qualname__,
            cls.__module__,
        )
        assert issubclass(sub, cls)
        assert sub.ray_enabled is False
    assert (
        same_name_subclass(StatefulCounterResourcesServer, {}).__name__
        == "StatefulCounterResourcesServer"
    )


def test_kinds() -> None:
    """Resources, model and agent classes map to their participant kinds; others are refused."""
    assert kind_of(StatefulCounterResourcesServer) == "resources"
    assert kind_of(VLLMModel) == "model"
    assert kind_of(SimpleAgent) == "agent"
    with pytest.raises(TypeError):
        kind_of(int)


def test_an_agent_without_a_forked_loop_is_refused() -> None:
    """Only simple_agent and gymnasium_agent have a checkpointable /run."""

    class OtherAgent(SimpleResponsesAPIAgent):
        ray_enabled = False

        async def responses(self, body=None):  # type: ignore[no-untyped-def]
            raise NotImplementedError

        async def run(self, body=None):  # type: ignore[no-untyped-def]
            raise NotImplementedError

    with pytest.raises(TypeError, match="simple_agent and gymnasium_agent"):
        checkpointable(OtherAgent, token=TOKEN)


async def test_control_routes_are_mounted_beside_the_servers_own() -> None:
    """A hosted server answers status with its token, refuses without it, and keeps its routes."""
    server, app = hosted(StatefulCounterResourcesServer, "counter")
    async with serve(app) as url, httpx.AsyncClient() as client:
        status = await client.get(
            f"{url}/ng-control/v1/checkpoint/status", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        assert status.json()["kind"] == "resources"
        assert status.json()["mode"] == "export_restore"
        unauthorized = await client.get(f"{url}/ng-control/v1/checkpoint/status")
        assert unauthorized.status_code == 401
        assert (await client.get(f"{url}/reverify_mode")).status_code == 200
    assert server.envckpt.core.server_name == "counter"


def test_the_participant_names_the_gym_instance_the_config_gives() -> None:
    """envckpt.instance_id of the nemo-gym config reaches the core: its events name it."""
    from helpers.nemo_gym_servers import global_config

    config = global_config("counter", "resources_servers", "test", domain="other")
    config["envckpt"] = {"instance_id": "counter/replica-3"}
    server, _ = hosted(StatefulCounterResourcesServer, "counter", config=config)
    assert server.envckpt.core.gym_instance_id == "counter/replica-3"
    assert server.envckpt.core.log_fields == {
        "server": "counter",
        "gym_instance_id": "counter/replica-3",
    }
    bare, _ = hosted(StatefulCounterResourcesServer, "counter")
    assert bare.envckpt.core.gym_instance_id is None


async def test_a_hosted_server_is_confined_and_serves_no_docs(tmp_path: Path) -> None:
    """The mounted participant writes only under its root; FastAPI's docs are gone."""
    server, app = hosted(StatefulCounterResourcesServer, "counter")
    assert server.envckpt.core.bounds.checkpoint_root == Path(tempfile.gettempdir())
    async with serve(app) as url, httpx.AsyncClient() as client:
        for path in ("/docs", "/redoc", "/openapi.json"):
            assert (await client.get(f"{url}{path}")).status_code == 404
        commit = await client.post(
            f"{url}/ng-control/v1/checkpoint/commit",
            json={"checkpoint_id": "c", "deadline_ts": time.time() + 30, "checkpoint_dir": "/"},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        assert commit.status_code == 422 and "checkpoint root" in commit.json()["error"]["detail"]


def test_a_hosted_server_without_a_checkpoint_root_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Neither ENVCKPT_CHECKPOINT_ROOT nor the config's envckpt.checkpoint_root: no server."""
    monkeypatch.delenv("ENVCKPT_CHECKPOINT_ROOT", raising=False)
    server = build(checkpointable(StatefulCounterResourcesServer, token=TOKEN), "counter")
    with pytest.raises(ValueError, match="ENVCKPT_CHECKPOINT_ROOT"):
        server.setup_webserver()
    monkeypatch.setenv("ENVCKPT_CHECKPOINT_ROOT", str(Path(tempfile.gettempdir())))
    assert server.setup_webserver() is not None


async def test_docs_stay_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """ENVCKPT_EXPOSE_DOCS=1 keeps nemo-gym's own docs."""
    monkeypatch.setenv("ENVCKPT_EXPOSE_DOCS", "1")
    _, app = hosted(StatefulCounterResourcesServer, "counter")
    # FastAPI builds nemo-gym's whole schema on the first request: seconds under load.
    async with serve(app) as url, httpx.AsyncClient(timeout=60.0) as client:
        assert (await client.get(f"{url}/openapi.json")).status_code == 200
