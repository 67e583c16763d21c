"""The Gym side as the trainer sees it: instances, adapter, in-process deployments."""
