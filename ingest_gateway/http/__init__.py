"""The HTTP API: the FastAPI app (REST Proxy v2 and the operators' routes), its route
modules, HTTP security and TLS details, the web console."""
