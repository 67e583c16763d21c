"""``envckpt demo --nemo-gym``: the demo's training job over two real nemo-gym deployments.

    demo = NemoGymDemo(directory=d, rollouts=10, seed=0)
    verdict, text = run_nemo_gym(demo, plan_interruptions(seed=0, kills=1, preempt=False))

The deployments are ``envckpt.nemo_gym.examples``'s, every server nemo-gym
0.7.0's own class (only the policy behind ``vllm_model`` is scripted):

* ``counter``: ``simple_agent`` + ``vllm_model`` + ``example_session_state_mgmt``;
* ``multi``: ``gymnasium_agent`` + ``vllm_model`` + ``example_multi_turn_gymnasium``.
  Not ``blackjack``: it deals from an unseeded RNG, so an uninterrupted run
  of the same task deals other cards and its reward cannot be compared
  (envckpt saves and restores the RNG state, so a restored hand does deal
  the cards it would have dealt; the comparison is what fails).

Like the default demo's process mode, this parent only launches, watches and
judges. Each run is ``python -m envckpt.demo.nemo_gym_job`` (the trainer and
the 8 servers in their own process group), carrying its planned
interruption, which it strikes itself on events (``nemo_gym_job``). After a
SIGKILL of the group, fresh processes restore the newest usable snapshot; the
last run finishes, then runs every task once more uninterrupted (the control
run the rewards are compared with). The verdict (``nemo_gym_verdict``) and the
tables (``summary``) come from the files left behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from envckpt.demo.nemo_gym_verdict import SPEC_NAME, judge_nemo_gym_directory
from envckpt.demo.plan import PLAN_NAME, Interruption, save_plan
from envckpt.demo.processes import launch_run, run_until_finished, watch
from envckpt.demo.report import Verdict, table
from envckpt.demo.scenario import DemoSettings
from envckpt.demo.summary import render_summary
from envckpt.nemo_gym import examples
from envckpt.nemo_gym.job_spec import JobSpec
from envckpt.process_tie import child_env

RUN_TIMEOUT = 600.0
GROUP_GONE_SECONDS = 10.0


@dataclass(frozen=True, slots=True)
class NemoGymDemo:
    """What the nemo-gym demo runs; half the rollouts (rounded up) go to the counter."""

    directory: Path
    rollouts: int = 10
    seed: int = 0
    snapshot_every: float = 0.5
    # Each model call takes this long, so snapshots find rollouts mid-loop
    # (``--generation-seconds``: a real policy model takes 10-60 s).
    policy_latency: float = 0.15
    in_flight_per_instance: int = 3
    # The snapshot's prepare budget (``--prepare-seconds``); generations still
    # running half-way through it are refused and asked again after resume.
    prepare_seconds: float = 30.0
    # When every snapshot is refused: start from scratch instead of exiting 3.
    allow_fresh_start: bool = False

    def __post_init__(self) -> None:
        if self.rollouts < 2:
            raise ValueError("the nemo-gym demo needs at least 2 rollouts, one per deployment")

    def job_spec(self) -> JobSpec:
        """The ``envckpt.nemo_gym.job`` spec of this demo."""
        return examples.example_job(
            self.directory,
            counters=(self.rollouts + 1) // 2,
            multi_turns=self.rollouts // 2,
            snapshot_every=self.snapshot_every,
            policy_latency=self.policy_latency,
            in_flight_per_instance=self.in_flight_per_instance,
            control_run=True,
            prepare_seconds=self.prepare_seconds,
            allow_fresh_start=self.allow_fresh_start,
        )

    @classmethod
    def from_directory(cls, directory: Path) -> NemoGymDemo:
        """The demo whose job spec ``directory`` holds (to resume it)."""
        spec = JobSpec.load(directory / SPEC_NAME)
        return cls(
            directory=directory,
            rollouts=len(spec.tasks),
            snapshot_every=spec.snapshot_every,
            policy_latency=spec.policy_latency,
            in_flight_per_instance=spec.in_flight_per_instance or 3,
            prepare_seconds=spec.prepare_seconds,
            allow_fresh_start=spec.allow_fresh_start,
        )

    def settings(self) -> DemoSettings:
        """The default demo's settings, for its progress bars and tables (2 instances)."""
        return DemoSettings(
            instances=2,
            rollouts=self.rollouts,
            seed=self.seed,
            directory=self.directory,
            snapshot_every=self.snapshot_every,
            in_flight_per_instance=self.in_flight_per_instance,
            allow_fresh_start=self.allow_fresh_start,
        )


def start_job(
    demo: NemoGymDemo, incarnation: int, *, interruption: Interruption | None
) -> subprocess.Popen[bytes]:
    """One run of the job, in a new process group (its servers are its children)."""
    return launch_run(
        "envckpt.demo.nemo_gym_job",
        demo.directory,
        incarnation,
        *("--spec", str(demo.directory / SPEC_NAME)),
        interruption=interruption,
        env=child_env(os.environ),  # the job dies with this demo (process_tie)
    )


def end_group(pgid: int, *, timeout: float = GROUP_GONE_SECONDS) -> bool:
    """SIGKILL whatever is left of a finished run's group; True once it is gone.

    The group is the one ``start_job`` created: the run's trainer and servers.
    Fresh servers must not start beside ones a kill has not yet reaped.
    """
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, signal.SIGKILL)
    give_up = time.monotonic() + timeout
    while time.monotonic() < give_up:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def run_nemo_gym(
    demo: NemoGymDemo, plan: list[Interruption], *, first: int = 1
) -> tuple[Verdict, str]:
    """Run the job until it finishes (each planned interruption, then a restart).

    ``first`` above 1 resumes an interrupted demo run (``resume``).
    """
    if first == 1:
        demo.job_spec().save(demo.directory / SPEC_NAME)
        save_plan(plan, demo.directory / PLAN_NAME)
    settings = demo.settings()

    def run(incarnation: int, interruption: Interruption | None) -> int | None:
        process = start_job(demo, incarnation, interruption=interruption)
        code = watch(settings, process, incarnation, timeout=RUN_TIMEOUT)
        if not end_group(process.pid):
            return None  # a server outlived its job: stop here, the verdict will fail
        return code

    exits = run_until_finished(demo.directory, plan, first, run)
    record, verdict = judge_nemo_gym_directory(demo.directory)
    text = "\n\n".join([deployments_table(demo), render_summary(settings, record.run, verdict)])
    last = max(exits)
    if exits[last] not in (0, None) or not record.run.done:
        text += "\n\n" + _tail(demo.directory / f"trainer-{last}.out")
    return verdict, text


def deployments_table(demo: NemoGymDemo) -> str:
    """What ran: each deployment's nemo-gym servers and its rollouts."""
    spec = demo.job_spec()
    rows = []
    for deployment in spec.deployments:
        scripted = set(deployment.config.get("envckpt", {}).get("scripted_policy", ()))
        servers = []
        for name, entry in deployment.config.items():
            if isinstance(entry, dict) and name not in ("envckpt", "token_id_capture"):
                for kind in entry.values():
                    servers += [
                        f"{name}: {implementation}"
                        + (" (scripted policy)" if name in scripted else "")
                        for implementation in kind
                    ]
        count = sum(1 for t in spec.tasks if t["shard"] == deployment.shard)
        rows.append((deployment.shard, ", ".join(sorted(servers)), count))
    return table("nemo-gym deployments", ("instance", "servers", "rollouts"), rows)


def _tail(path: Path, lines: int = 15) -> str:
    text = path.read_text(errors="replace").splitlines() if path.exists() else []
    return "\n".join(text[-lines:])
