"""The Kafka listener (sockets, framing, TLS), SASL authentication, the request context and
the inter-broker client. The lowest layer of the broker process: it imports no other package
of ingest_gateway but observability."""
