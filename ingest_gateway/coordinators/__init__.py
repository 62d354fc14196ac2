"""What the broker adds around loglake's transport-free coordinators: finding a group's or a
transactional id's coordinator, the internal topics as their logs, transaction markers."""
