"""Kafka's security model, independent of any transport: listeners and their security
protocols, TLS contexts from PEM files, SASL servers (PLAIN, SCRAM-SHA-256/512) checked
against SCRAM credentials, and principals.

Modules:
    listeners   listener names, security protocols, listener-prefixed configs
    tls         ssl.SSLContext from Kafka's ssl.* settings (PEM), certificate principals
    scram       SCRAM credentials (Kafka's stored format) and the RFC 5802 server exchange
    sasl        the SASL servers a connection authenticates with, by mechanism
    principal   KafkaPrincipal ("User:alice")
"""
