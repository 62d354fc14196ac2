"""Cluster metadata and the controller, over ZooKeeper or the embedded single-node store."""
