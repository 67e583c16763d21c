"""End to end: a training job over two real nemo-gym deployments, SIGKILLed and restored.

The job process (trainer plus every server, one process group) runs until a
snapshot saved rollouts mid-loop, then the whole group is SIGKILLed. Fresh
processes restore and finish. The evidence comes only from the files left:
results, an uninterrupted control run, the resources servers' audit, the
trainer's data plane.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("responses_api_agents.simple_agent.app")

from envckpt.nemo_gym import evidence, examples
from envckpt.nemo_gym.job_spec import DeploymentSpec, JobSpec
from envckpt.trainer.dataplane import SqliteDataPlane
from envckpt.trainer.event_log import read_events

from helpers.proc_tree import alive, command, descendants, outliving

GONE_SECONDS = 5.0  # the promise: nothing a SIGKILLed trainer started outlives it longer


def job_spec(directory: Path, *, counters: int, multi_turns: int) -> JobSpec:
    return examples.example_job(
        directory,
        counters=counters,
        multi_turns=multi_turns,
        snapshot_every=0.3,
        policy_latency=0.15,
        in_flight_per_instance=3,
        control_run=True,
    )


def start(spec: JobSpec, incarnation: int) -> subprocess.Popen[bytes]:
    with (spec.directory / f"job-{incarnation}.out").open("ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "envckpt.nemo_gym.job",
                "--spec",
                str(spec.directory / "job.json"),
                "--incarnation",
                str(incarnation),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: trainer and servers
        )


def kill_group_after_snapshot(
    spec: JobSpec, job: subprocess.Popen[bytes], *, timeout: float
) -> dict[str, Any]:
    give_up = time.monotonic() + timeout
    while time.monotonic() < give_up:
        events = [e for e in read_events(spec.directory / "events.jsonl") if e["incarnation"] == 1]
        saved = [e for e in events if e["event"] == "snapshot" and e["exported"] >= 2]
        if saved:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
            return saved[-1]
        assert job.poll() is None, (spec.directory / "job-1.out").read_text()[-3000:]
        time.sleep(0.02)
    raise TimeoutError("no snapshot with rollouts in flight")


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def data_plane_rows(path: Path) -> dict[str, tuple[str, str]]:
    rows = {}
    with SqliteDataPlane(path) as plane:
        for key in sorted(plane.keys()):
            row = plane.get(key)
            assert row is not None
            rows[key] = (row.capture_key, row.payload.decode())
    return rows


def run_and_check(spec: JobSpec) -> None:
    spec.directory.mkdir(parents=True, exist_ok=True)
    spec.save(spec.directory / "job.json")
    first = start(spec, 1)
    try:
        snapshot = kill_group_after_snapshot(spec, first, timeout=240)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(first.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while group_alive(first.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not group_alive(first.pid), "a server survived the SIGKILL of its job's group"
    second = start(spec, 2)
    assert second.wait(timeout=240) == 0, (spec.directory / "job-2.out").read_text()[-3000:]

    events = read_events(spec.directory / "events.jsonl")
    restored = next(e for e in events if e["incarnation"] == 2 and e["event"] == "restored")
    assert restored["snapshot"] is not None and len(restored["continued"]) >= 1, restored
    results = json.loads((spec.directory / "results.json").read_text())
    control = json.loads((spec.directory / "control.json").read_text())
    tasks = {t["rollout_id"]: t["task"] for t in spec.tasks}
    assert set(results) == set(tasks)
    assert evidence.reward_mismatches(results, control) == []
    assert all(result["reward"] == 1.0 for result in results.values())
    audit = evidence.read_jsonl(sorted((spec.directory / "audit").glob("*.audit.jsonl")))
    assert evidence.audit_problems(results, audit, tasks) == []
    rows = data_plane_rows(spec.directory / "live.sqlite")
    assert evidence.token_row_problems(results, rows) == []
    continued = evidence.continued_from_turn(results)
    assert continued, f"no rollout continued from a saved turn (snapshot {snapshot})"
    # A continued rollout finished as the attempt after the saved one, keeping the saved rows.
    for rid in continued:
        assert results[rid]["envckpt"]["attempt"] >= 1
        assert any(
            not key.startswith(results[rid]["envckpt"]["capture_key"] + "/")
            for key in results[rid]["staging_keys"]
        )


@pytest.mark.slow  # a kill-and-restore run: make verify (make test keeps the nemo-gym demo's)
def test_job_killed_after_a_snapshot_finishes_in_fresh_processes(tmp_path: Path) -> None:
    """Rewards equal the uninterrupted run's, increments applied once, token rows consistent."""
    run_and_check(job_spec(tmp_path / "job", counters=6, multi_turns=4))


@pytest.mark.slow
def test_larger_job_killed_after_a_snapshot(tmp_path: Path) -> None:
    """The same with more rollouts per deployment."""
    run_and_check(job_spec(tmp_path / "job", counters=16, multi_turns=12))


def test_spec_round_trips_and_names_instances(tmp_path: Path) -> None:
    """A saved spec loads back equal; each task lands on its deployment's instance."""
    spec = job_spec(tmp_path, counters=2, multi_turns=1)
    spec.save(tmp_path / "job.json")
    loaded = JobSpec.load(tmp_path / "job.json")
    assert loaded.to_json() == spec.to_json()
    assert [t.instance_id for t in loaded.rollout_tasks()] == [
        "counter/replica-0",
        "counter/replica-0",
        "multi/replica-0",
    ]


def test_each_incarnation_gets_its_own_capture_dir_and_the_trainer_endpoint(tmp_path: Path) -> None:
    """Instance id, staging URL, audit dir, policy latency in the envckpt block; capture dir."""
    from envckpt.nemo_gym.job import incarnation_config

    spec = job_spec(tmp_path, counters=1, multi_turns=1)
    config = incarnation_config(
        spec,
        spec.deployments[0],
        run_dir=tmp_path / "run-2" / "counter",
        staging_url="http://t/rows",
    )
    assert config["envckpt"]["staging_url"] == "http://t/rows"
    assert config["envckpt"]["instance_id"] == spec.deployments[0].instance.instance_id
    assert config["envckpt"]["audit_dir"] == str(tmp_path / "audit")
    assert config["token_id_capture"]["dir"] == str(tmp_path / "run-2" / "counter" / "tokens")
    assert "staging_url" not in spec.deployments[0].config["envckpt"]  # the spec is untouched


async def test_control_rows_stay_out_of_the_ledger() -> None:
    """After the job, rows of the uninterrupted control run are kept apart."""
    from envckpt.nemo_gym.job import RowSink

    class Pending:
        def __init__(self) -> None:
            self.rows: list[str] = []

        async def stage(self, capture_key: str, staging_key: str, payload: str) -> None:
            self.rows.append(staging_key)

    pending = Pending()
    sink = RowSink(pending)
    await sink.stage("r1", "r1/a", "{}")
    sink.control = {}
    await sink.stage("r1.control", "r1.control/b", "{}")
    assert pending.rows == ["r1/a"]
    assert sink.control == {"r1.control/b": ("r1.control", "{}")}


# ------------------------------------------------- the job's edges, real processes


def counter_job(directory: Path, *, tasks: int = 2, **fields: Any) -> JobSpec:
    """One deployment (counter: 4 servers), a few tasks; saved as job.json."""
    spec = JobSpec(
        directory=directory,
        deployments=(DeploymentSpec("counter", examples.counter_config(), agent="counter_agent"),),
        tasks=tuple(
            {"rollout_id": f"count-{i}", "shard": "counter", "task": task}
            for i, task in enumerate(examples.counter_tasks(tasks))
        ),
        **{"snapshot_every": 0.3, "in_flight_per_instance": 2, **fields},
    )
    directory.mkdir(parents=True, exist_ok=True)
    spec.save(directory / "job.json")
    return spec


def run_job_process(spec: JobSpec, incarnation: int, *, timeout: float = 240) -> tuple[int, str]:
    """``python -m envckpt.nemo_gym.job`` to its end: exit code, and stdout + stderr."""
    spec_file = str(spec.directory / "job.json")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "envckpt.nemo_gym.job",
            "--spec",
            spec_file,
            "--incarnation",
            str(incarnation),
        ],
        capture_output=True,
        timeout=timeout,
        start_new_session=True,
    )
    return done.returncode, (done.stdout + done.stderr).decode(errors="replace")


def tree_state(directory: Path) -> dict[str, tuple[int, int, int, int]]:
    """Every entry under ``directory``: mode, size, inode and mtime (lstat, links not followed)."""
    state = {}
    for path in [directory, *sorted(directory.rglob("*"))]:
        info = path.lstat()
        state[str(path.relative_to(directory))] = (
            info.st_mode,
            info.st_size,
            info.st_ino,
            info.st_mtime_ns,
        )
    return state


@pytest.mark.slow  # a kill-and-restore run: make verify (make test keeps the nemo-gym demo's)
def test_a_job_killed_after_it_finished_requeues_as_a_no_op(tmp_path: Path) -> None:
    """Killed after every rollout sealed (during its control run): run again it exits 0 with
    'already finished', redoes no rollout, and no file under its directory changes."""
    spec = counter_job(tmp_path / "job", control_run=True, policy_latency=0.5)
    job = start(spec, 1)
    try:
        give_up = time.monotonic() + 240
        while not any(e["event"] == "done" for e in read_events(spec.directory / "events.jsonl")):
            assert job.poll() is None and time.monotonic() < give_up, (
                spec.directory / "job-1.out"
            ).read_text()[-3000:]
            time.sleep(0.02)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)  # the whole job, before its control run ends
        job.wait()
    results = json.loads((spec.directory / "results.json").read_text())
    assert set(results) == {"count-0", "count-1"}
    assert (spec.root / "FINISHED.json").exists()
    before = tree_state(spec.directory)
    code, output = run_job_process(spec, 2, timeout=60)
    assert code == 0 and "already finished" in output and "Traceback" not in output, output
    assert tree_state(spec.directory) == before  # the audit included: no tool call again


def test_a_damaged_finished_record_refuses_the_start(tmp_path: Path) -> None:
    """Tampered: a FINISHED.json that does not verify refuses (exit 3), nothing starts."""
    spec = counter_job(tmp_path / "job")
    spec.root.mkdir(parents=True)
    (spec.root / "FINISHED.json").write_text('{"kind": "envckpt.finished"}')
    code, output = run_job_process(spec, 1, timeout=60)
    assert code == 3 and "FINISHED.json" in output and "Traceback" not in output, output
    assert not (spec.directory / "run-1").exists()


def test_an_unusable_root_exits_3_before_any_server_starts(tmp_path: Path) -> None:
    """The snapshot root is a file: one line, exit 3, no server launched."""
    spec = counter_job(tmp_path / "job")
    spec.root.write_text("not a directory")
    code, output = run_job_process(spec, 1, timeout=60)
    assert code == 3 and "Traceback" not in output, output
    assert not (spec.directory / "run-1").exists()
    assert len([line for line in output.splitlines() if line.strip()]) == 1, output


def test_a_port_the_config_names_held_elsewhere_exits_3_naming_it(tmp_path: Path) -> None:
    """A listening socket on the agent's configured port: exit 3 naming port and holder."""
    config = examples.counter_config()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        config["counter_agent"]["responses_api_agents"]["simple_agent"]["port"] = port
        spec = counter_job(tmp_path / "job")
        spec = JobSpec.from_json(
            {
                **spec.to_json(),
                "deployments": [{"shard": "counter", "config": config, "agent": "counter_agent"}],
            }
        )
        spec.save(spec.directory / "job.json")
        code, output = run_job_process(spec, 1, timeout=120)
    assert code == 3 and "Traceback" not in output, output
    assert f"port {port} is held by pid {os.getpid()}" in output


def test_snapshots_failing_in_a_row_exit_4(tmp_path: Path) -> None:
    """Generations outlast a prepare that waits for them: the snapshots fail, exit 4, one line."""
    spec = counter_job(
        tmp_path / "job", policy_latency=3.0, prepare_seconds=0.3, model_calls="wait"
    )
    code, output = run_job_process(spec, 1)
    assert code == 4 and "Traceback" not in output, output[-3000:]
    stopped = [e for e in read_events(spec.directory / "events.jsonl") if e["event"] == "stopped"]
    assert stopped and stopped[0]["error"] == "SnapshotsFailing"


def test_long_generations_are_refused_at_prepare_and_asked_again(tmp_path: Path) -> None:
    """Generations of 1.5 s, a 1 s prepare budget: every snapshot publishes, the refused calls
    are issued again from the same turn, and every reward equals the uninterrupted run's."""
    spec = counter_job(tmp_path / "job", policy_latency=1.5, prepare_seconds=1.0, control_run=True)
    code, output = run_job_process(spec, 1)
    assert code == 0, output[-3000:]
    events = read_events(spec.directory / "events.jsonl")
    published = [e for e in events if e["event"] == "snapshot"]
    assert published and not [e for e in events if e["event"] == "snapshot_failed"]
    results = json.loads((spec.directory / "results.json").read_text())
    control = json.loads((spec.directory / "control.json").read_text())
    assert evidence.reward_mismatches(results, control) == []
    assert all(result["reward"] == 1.0 for result in results.values())
    refused = sum(result["envckpt"]["model_calls_refused"] for result in results.values())
    assert refused >= 1, "no snapshot refused a generation in flight"
    pauses = [e["metrics"]["snapshot_paused_seconds"] for e in published]
    assert max(pauses) < spec.policy_latency + spec.prepare_seconds  # never a whole generation


def test_sigkill_of_the_trainer_alone_leaves_no_process(tmp_path: Path) -> None:
    """Only the trainer's pid is SIGKILLed: its servers, forkserver and helpers are all gone
    within 5 s (counted in /proc)."""
    spec = counter_job(tmp_path / "job", policy_latency=2.0)
    job = start(spec, 1)
    tree: set[int] = set()
    try:
        give_up = time.monotonic() + 240
        while not any(
            e["event"] == "launched" for e in read_events(spec.directory / "events.jsonl")
        ):
            assert job.poll() is None and time.monotonic() < give_up, (
                spec.directory / "job-1.out"
            ).read_text()[-3000:]
            time.sleep(0.05)
        tree = descendants(job.pid)
        assert len(tree) >= 5, [command(pid) for pid in tree]  # 4 servers, forkserver, ...
        left = outliving(job, tree, GONE_SECONDS)  # the trainer alone, not its group
        assert not left, [command(pid) for pid in left]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
        for pid in alive(tree):
            os.kill(pid, signal.SIGKILL)


def test_a_deployment_whose_agent_takes_no_part_is_refused_at_start(tmp_path: Path) -> None:
    """The agent runs unmodified (no participant): no snapshot could restore its rollouts (nor
    would its /run park for one), so the job refuses to start: exit 3, one line, nothing run."""
    config = examples.counter_config()
    config["envckpt"] = {**config["envckpt"], "plain_servers": ["counter_agent"]}
    spec = counter_job(tmp_path / "job", policy_latency=1.0, model_calls="wait")
    spec = JobSpec.from_json(
        {
            **spec.to_json(),
            "deployments": [{"shard": "counter", "config": config, "agent": "counter_agent"}],
        }
    )
    spec.save(spec.directory / "job.json")
    code, output = run_job_process(spec, 1)
    assert code == 3 and "Traceback" not in output, output[-3000:]
    assert "counter_agent takes no part in checkpoints" in output
    events = read_events(spec.directory / "events.jsonl")
    assert not [e for e in events if e["event"] in ("dispatched", "snapshot")]
