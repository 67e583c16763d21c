"""Mount envckpt's control routes on a nemo-gym server, then checkpoint it over HTTP.

    python examples/mount_on_nemo_gym.py

``checkpointable(ServerClass)`` is the one call a nemo-gym server needs: the
returned subclass builds nemo-gym's own app, adds the participant of its
kind and mounts ``/ng-control/v1/checkpoint/*`` beside nemo-gym's routes.
``mount_participant(app, core, token=...)`` is what it calls, and mounts the
routes on any FastAPI app: here a policy model of our own (discovery needs a
model), with a participant core that holds no state.

nemo-gym's stateful counter serves one rollout's session; the trainer side
discovers both servers through nemo-gym's ``ServerClient``, takes a
checkpoint, and the session's counter is in the saved records.

Needs nemo-gym (``envckpt[gym]``) and ``envckpt[http]``.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from pathlib import Path

import httpx
from fastapi import FastAPI
from nemo_gym.config_types import BaseServerConfig
from nemo_gym.server_utils import ServerClient
from omegaconf import OmegaConf
from resources_servers.example_session_state_mgmt.app import (
    StatefulCounterResourcesServer,
    StatefulCounterResourcesServerConfig,
)

from envckpt import Coordinator, HttpTransport, NoState, ParticipantCore, mount_participant
from envckpt.http.serve import serve_many
from envckpt.nemo_gym.hosting import checkpointable
from envckpt.participant import store

TOKEN = "example-control-token-51c0de"  # in production: ENVCKPT_GYM_TOKEN(_FILE)
HOST = "127.0.0.1"


def global_config(counter_port: int = 1, model_port: int = 1) -> dict[str, object]:
    """The nemo-gym config naming both servers (port 1 until they listen)."""
    counter = {"entrypoint": "app.py", "host": HOST, "port": counter_port, "domain": "other"}
    # Where the hosted participants may write checkpoints (ENVCKPT_CHECKPOINT_ROOT wins).
    envckpt_block = {"checkpoint_root": tempfile.gettempdir()}
    model = {"entrypoint": "app.py", "host": HOST, "port": model_port}
    return {
        "head_server": {"host": HOST, "port": 1},
        "counter": {"resources_servers": {"example_session_state_mgmt": counter}},
        "policy_model": {"responses_api_models": {"my_model": model}},
        "envckpt": envckpt_block,
    }


def server_client(config: dict[str, object]) -> ServerClient:
    head = BaseServerConfig(**config["head_server"])  # type: ignore[arg-type]
    return ServerClient(head_server_config=head, global_config_dict=OmegaConf.create(config))


async def main(checkpoint_dir: Path) -> int:
    Hosted = checkpointable(StatefulCounterResourcesServer, token=TOKEN)
    settings = StatefulCounterResourcesServerConfig(
        host=HOST, port=1, entrypoint="app.py", name="counter", domain="other"
    )
    server = Hosted(config=settings, server_client=server_client(global_config()))
    counter_app = server.setup_webserver()  # nemo-gym's routes + the control routes
    model_app = FastAPI()  # a server of our own: mount the routes ourselves
    model = ParticipantCore(server_name="policy_model", kind="model", hooks=NoState())
    mount_participant(model_app, model, token=TOKEN, checkpoint_root=checkpoint_dir)

    async with serve_many([counter_app, model_app], host=HOST) as urls:
        url = urls[0]
        async with httpx.AsyncClient() as gym_client:
            # A rollout's tool calls: the episode's prefix links the session to rollout r1.
            await gym_client.post(f"{url}/ng-rollout/r1/seed_session", json={"initial_count": 3})
            await gym_client.post(f"{url}/increment_counter", json={"count": 4})
            status = await gym_client.get(
                f"{url}/ng-control/v1/checkpoint/status",
                headers={"Authorization": f"Bearer {TOKEN}"},
            )
            print("counter's control status:", status.json()["phase"], status.json()["mode"])

        ports = [int(u.rsplit(":", 1)[1]) for u in urls]
        client = server_client(global_config(*ports))
        async with HttpTransport.from_server_client(client, token=TOKEN) as transport:
            coordinator = Coordinator(transport)
            participants = await coordinator.discover()
            print("participants:", [(m.server_name, str(m.kind)) for m in participants.members])
            deadline = time.time() + 30
            result = await coordinator.prepare(participants, "ck-example-1", deadline_ts=deadline)
            print("prepared:", result.prepared)
            replies = await coordinator.commit(
                participants, "ck-example-1", str(checkpoint_dir), None, deadline_ts=deadline
            )
            print("committed episodes:", replies["counter"]["episode_ids"])
            await coordinator.resume(participants, "ck-example-1", deadline_ts=deadline)

    manifest = store.read_manifest(checkpoint_dir, kind="resources", instance="counter")
    [record] = list(store.iter_records(checkpoint_dir, manifest))
    episode, state = store.from_record(record)
    print(f"saved {episode.capture_key}: {json.dumps(state, sort_keys=True)}")
    return 0 if "7" in json.dumps(state) else 1


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main(Path(tempfile.mkdtemp(prefix="envckpt-mount-")))))
