"""The state machines: pure tables (``tables``) and their binding to ``transitions``."""
