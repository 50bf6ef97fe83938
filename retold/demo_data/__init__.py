"""Recorded extraction outputs for the ``retold demo`` transcript."""
