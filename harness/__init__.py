"""Test and launch helpers of a checkout (tests, scripts/, bench/): a broker as a child
process, a standalone ZooKeeper, a local cluster of both. Not part of the product package."""
