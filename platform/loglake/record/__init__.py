"""Kafka's magic-2 record batch format, byte for byte."""
