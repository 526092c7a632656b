"""The REST API served by the manager process (NNI-compatible routes under /api/v1/nni)."""
