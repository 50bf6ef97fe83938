"""The read path: rewrite, filter, generate, fuse, gate, dedup, rerank, budget,
explain and log."""
