"""The read path of LLD 10: rewrite, filter, generate, fuse, gate, dedup, rerank, budget,
explain and log."""
