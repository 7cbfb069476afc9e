"""The per-rank training loop, its timers, metrics and checkpoints."""
