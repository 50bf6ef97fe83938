"""The five framework-neutral memory tools: JSON schemas and handlers."""
