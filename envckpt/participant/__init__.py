"""Participant side of the control protocol: phases, admission, state hooks, store."""
