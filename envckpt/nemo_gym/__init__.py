"""Checkpoint real nemo-gym 0.7.0 deployments: envckpt's participants inside nemo-gym's servers.

Hosting and launch::

    hosting.checkpointable(cls)      # any nemo-gym server class + its participant, same __name__
    launcher.launch(config, ...)     # Ray-free: one process per server (serve.py, processes.py)
    scripted_policy                  # deterministic OpenAI-compatible stand-in for vLLM

The kinds::

    resources.py  sessions.py  adapters.py     # session gate, a server's sessions, example adapters
    session_registry.py                         # the author protocol and the adapter registry
    model.py  staging.py                        # generation gate, token rows, rows to the trainer
    agent_runtime.py  run_state.py  calls.py    # phased /run, saved at every boundary
    simple_agent.py  gymnasium_agent.py  loop_state.py  agents.py  upstream.py   # the forks

Driving a job (trainer side unchanged)::

    backend.NemoGymBackend    job.run_job / python -m envckpt.nemo_gym.job    examples    evidence

Nothing here imports ``envckpt.sim`` or ``envckpt.demo``. See docs/nemo-gym.md.
"""
