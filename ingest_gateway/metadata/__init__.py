"""The cluster as this broker sees it: the metadata cache, topic administration, the
controller channel, dynamic broker configs, the endpoints clients are given."""
