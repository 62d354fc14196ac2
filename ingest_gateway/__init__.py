"""The loglake broker process: Kafka listener, HTTP API, replica management, controller duties."""
