"""Kafka's transaction coordinator (KIP-98), independent of any transport.

The broker's Kafka protocol handlers (InitProducerId with a transactional id,
AddPartitionsToTxn and its verify-only form, AddOffsetsToTxn, EndTxn, DescribeTransactions,
ListTransactions) call one `TransactionCoordinator`:

    coordinator = TransactionCoordinator(TransactionConfig.from_properties(props),
                                         txn_log, marker_channel, allocate_producer_id)
    await coordinator.start()                       # transaction.timeout.ms expiry
    await coordinator.load_partition(p, epoch)      # each __transaction_state partition led here
    result = await coordinator.init_producer_id("my-txn", 60_000)
    await coordinator.add_partitions_to_txn("my-txn", result.producer_id, result.producer_epoch, tps)
    await coordinator.end_txn("my-txn", result.producer_id, result.producer_epoch, commit=True)

Modules:
    api          results, the MarkerChannel and ProducerIdAllocator seams
    coordinator  TransactionCoordinator, TransactionConfig
    state        TransactionState, TransactionMetadata (Kafka's state machine)
    records      __transaction_state key/value formats
The log seam is `loglake.internal_topics.InternalTopicLog`, shared with the group coordinator.
"""

from loglake.transactions.api import (
    InitProducerIdResult,
    MarkerChannel,
    ProducerIdAllocator,
    TransactionDescription,
    TransactionListing,
)
from loglake.transactions.coordinator import TransactionConfig, TransactionCoordinator
from loglake.transactions.state import TransactionMetadata, TransactionState

__all__ = [
    "InitProducerIdResult",
    "MarkerChannel",
    "ProducerIdAllocator",
    "TransactionConfig",
    "TransactionCoordinator",
    "TransactionDescription",
    "TransactionListing",
    "TransactionMetadata",
    "TransactionState",
]
