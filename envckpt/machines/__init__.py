"""The state machines: pure tables (``table``, ``tables``) and their binding to ``transitions``."""
