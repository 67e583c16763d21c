"""Coordinator side of the control protocol: ordering, results, transports."""
