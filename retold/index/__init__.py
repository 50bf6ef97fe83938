"""Dense vector side of Retold: embedders and the in-RAM vector index."""
