"""``make mutation``: mutmut over the machines, the participant core and the adapter."""
