"""Evidence checks, entity resolution, equivalence judging, the ingestor and session capture (LLD 8, 9, 12)."""  # noqa: E501
