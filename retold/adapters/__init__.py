"""Integrations that connect Retold to agent hosts; none is imported by ``import retold``."""
