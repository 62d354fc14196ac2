"""The loglake broker process: Kafka listener, HTTP API, replica management, controller duties.

Its packages are layers: a module imports modules of its own layer or of the layers below
it, never above (tests/unit/test_import_layers.py checks it, TYPE_CHECKING imports included).
"""

# From the bottom up.
LAYERS = ("observability", "network", "replica", "metadata", "coordinators", "apis", "http", "server")
