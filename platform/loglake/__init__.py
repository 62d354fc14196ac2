"""loglake: a streaming platform with Apache Kafka's semantics whose log is a Spark dataset."""

__version__ = "0.1.0"
