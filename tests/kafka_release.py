"""The protocol release the broker presents itself as, which the tests hold its handlers'
declared version ranges to (`@handles` in ingest_gateway/apis/).

A client that pins a Kafka version (kafka-python's `api_version`, librdkafka's
`broker.version.fallback`) or infers one from ApiVersions expects the version ranges of
one real release, not a mix. The broker advertises Kafka 3.9.0's ranges (the release of
the message definitions it ships) for every API it serves, with one exception taken from
Kafka 4.0 (KIP-896): versions that can only carry message formats v0/v1 are not served
(Produce v0-2, Fetch v0-3, ListOffsets v0), because the log holds record batches v2 only.
ConsumerGroupHeartbeat is advertised up to Kafka 4.0's v1 (KIP-848 GA): clients send their
regex subscription (`SubscribedTopicRegex`) only from v1. ConsumerGroupDescribe is too
(v1, KIP-1099): each member's type, classic or consumer, in a group migrating between them.
"""

from __future__ import annotations

# Kafka 3.9.0's ApiVersions ranges of a ZooKeeper-mode broker: api key -> (min, max).
KAFKA_3_9_VERSIONS: dict[int, tuple[int, int]] = {
    0: (0, 11),  # Produce
    1: (0, 17),  # Fetch
    2: (0, 9),  # ListOffsets
    3: (0, 12),  # Metadata
    4: (0, 7),  # LeaderAndIsr
    5: (0, 4),  # StopReplica
    6: (0, 8),  # UpdateMetadata
    7: (0, 3),  # ControlledShutdown
    8: (0, 9),  # OffsetCommit
    9: (0, 9),  # OffsetFetch
    10: (0, 6),  # FindCoordinator
    11: (0, 9),  # JoinGroup
    12: (0, 4),  # Heartbeat
    13: (0, 5),  # LeaveGroup
    14: (0, 5),  # SyncGroup
    15: (0, 5),  # DescribeGroups
    16: (0, 5),  # ListGroups
    17: (0, 1),  # SaslHandshake
    18: (0, 4),  # ApiVersions
    19: (0, 7),  # CreateTopics
    20: (0, 6),  # DeleteTopics
    21: (0, 2),  # DeleteRecords
    22: (0, 5),  # InitProducerId
    23: (0, 4),  # OffsetForLeaderEpoch
    24: (0, 5),  # AddPartitionsToTxn
    25: (0, 4),  # AddOffsetsToTxn
    26: (0, 4),  # EndTxn
    27: (0, 1),  # WriteTxnMarkers
    28: (0, 4),  # TxnOffsetCommit
    29: (0, 3),  # DescribeAcls
    30: (0, 3),  # CreateAcls
    31: (0, 3),  # DeleteAcls
    32: (0, 4),  # DescribeConfigs
    33: (0, 2),  # AlterConfigs
    34: (0, 2),  # AlterReplicaLogDirs
    35: (0, 4),  # DescribeLogDirs
    36: (0, 2),  # SaslAuthenticate
    37: (0, 3),  # CreatePartitions
    38: (0, 3),  # CreateDelegationToken
    39: (0, 2),  # RenewDelegationToken
    40: (0, 2),  # ExpireDelegationToken
    41: (0, 3),  # DescribeDelegationToken
    42: (0, 2),  # DeleteGroups
    43: (0, 2),  # ElectLeaders
    44: (0, 1),  # IncrementalAlterConfigs
    45: (0, 0),  # AlterPartitionReassignments
    46: (0, 0),  # ListPartitionReassignments
    47: (0, 0),  # OffsetDelete
    48: (0, 1),  # DescribeClientQuotas
    49: (0, 1),  # AlterClientQuotas
    50: (0, 0),  # DescribeUserScramCredentials
    51: (0, 0),  # AlterUserScramCredentials
    56: (0, 3),  # AlterPartition
    57: (0, 1),  # UpdateFeatures
    58: (0, 0),  # Envelope
    60: (0, 1),  # DescribeCluster
    61: (0, 0),  # DescribeProducers
    65: (0, 0),  # DescribeTransactions
    66: (0, 1),  # ListTransactions
    67: (0, 0),  # AllocateProducerIds
    68: (0, 0),  # ConsumerGroupHeartbeat (v1 from Kafka 4.0, see KAFKA_4_0_CEILINGS)
    69: (0, 0),  # ConsumerGroupDescribe (v1 from Kafka 4.0, see KAFKA_4_0_CEILINGS)
}

# Kafka 4.0 (KIP-896) dropped these; loglake never served them (no message format v0/v1).
REMOVED_IN_KAFKA_4_0_FLOORS: dict[int, int] = {0: 3, 1: 4, 2: 1}
# Versions Kafka 4.0 added that the broker serves: ConsumerGroupHeartbeat v1, ConsumerGroupDescribe v1.
KAFKA_4_0_CEILINGS: dict[int, int] = {68: 1, 69: 1}


def release_versions(api_key: int) -> tuple[int, int]:
    """The range the broker advertises for `api_key`: Kafka 3.9.0's, floors and ceilings as above."""
    lo, hi = KAFKA_3_9_VERSIONS[api_key]
    return max(lo, REMOVED_IN_KAFKA_4_0_FLOORS.get(api_key, lo)), KAFKA_4_0_CEILINGS.get(api_key, hi)
