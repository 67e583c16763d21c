"""Transition coverage of the test suite: which machine rows the tests fire, and how.

``plugin`` records every transition the suite fires (in this process, and in
the ``python -m envckpt.sim.server`` processes tests start), classified as
``http`` (fired in a test in which a control call crossed a real HTTP server)
or ``in-process``; ``rows`` turns the records into a per-table report.
"""
