"""Evidence checks, entity resolution, equivalence judging, the ingestor and session capture."""
