"""``envckpt report ROOT``: one self-contained HTML page of what happened under a snapshot root.

``sources`` reads the root (the telemetry log, the demo's events and
verdict, results), ``transition_logs`` the structured logs, ``plots`` draws
the figures with matplotlib (static SVG), ``statecharts`` the four machines
with the run's counts (the project's Mermaid renderer), ``page`` puts them
into one HTML file and ``cli`` is the command.
"""
