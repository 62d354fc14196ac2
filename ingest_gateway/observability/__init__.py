"""Metrics (GET /metrics, request timing) and the process's logging."""
