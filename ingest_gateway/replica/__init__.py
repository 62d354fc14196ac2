"""Hosted replicas: the replica manager (produce, acks, ISR, high watermarks), the follower
fetchers and their fetch sessions, moves between log directories."""
