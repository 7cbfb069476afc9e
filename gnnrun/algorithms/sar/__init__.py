"""Full batch on edge-cut parts without halo copies: `sar` and `domain_parallel` (sar), and
the sharded aggregation that fetches remote rows (shards)."""
