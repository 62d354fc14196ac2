"""Partition state (LEO, high watermark, ISR, leader epoch), assignment and the metadata image."""
