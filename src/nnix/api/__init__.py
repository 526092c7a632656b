"""The HTTP side of an experiment's manager: NNI-compatible REST (/api/v1/nni), the native API with
live events (/api/nnix/v1, OpenAPI at /api/nnix/v1/openapi.json) and the web UI (/)."""
