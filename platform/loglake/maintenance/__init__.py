"""Log maintenance above the storage engine: compaction (Kafka's LogCleaner roles).

`offset_map` (key -> latest offset), `cleaner` (the segment-rewrite core shared by both
executors), `cleaner_manager` (which log to clean next, cleaner checkpoints, dirty ratios),
`log_cleaner` (the broker's cleaner threads).
"""
