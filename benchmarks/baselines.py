"""The plain hybrid every retrieval benchmark compares Retold against.

Dense cosine over the documents' vectors, BM25 from an SQLite FTS5 table with the porter
stemmer, and their reciprocal rank fusion (k = 60, the top 30 of each list): what a new
user would build in an afternoon, and what Retold's ranking must at least match.
"""

from __future__ import annotations

import sqlite3
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import numpy as np

from retold.retrieve.stopwords import STOPWORDS

__all__ = ["PER_LIST", "RRF_K", "Hybrid"]

PER_LIST = 30
RRF_K = 60


class Hybrid:
    """Dense + BM25 (porter) + RRF over one set of documents, keyed by the caller."""

    def __init__(self, embedder: Any, keys: Sequence[str], texts: Sequence[str],
                 vectors: np.ndarray | None = None) -> None:
        self.keys = list(keys)
        self.embedder = embedder
        self.vectors = (np.asarray(embedder.embed_documents(list(texts))) if vectors is None
                        else np.asarray(vectors, dtype=np.float32))
        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE VIRTUAL TABLE f USING fts5(body, tokenize='porter unicode61')")
        self.db.executemany("INSERT INTO f(rowid, body) VALUES (?, ?)", list(enumerate(texts)))

    def dense(self, text: str) -> list[str]:
        """The top documents by cosine."""
        q = np.asarray(self.embedder.embed_queries([text]))[0]
        order = np.argsort(-(self.vectors @ q))[:PER_LIST]
        return [self.keys[i] for i in order]

    def bm25(self, text: str) -> list[str]:
        words = [w for w in "".join(ch.lower() if ch.isalnum() else " " for ch in text).split()
                 if w not in STOPWORDS]
        if not words:
            return []
        match = " OR ".join(f'"{w}"' for w in dict.fromkeys(words))
        rows = self.db.execute(
            "SELECT rowid FROM f WHERE f MATCH ? ORDER BY bm25(f) LIMIT ?", (match, PER_LIST)
        ).fetchall()
        return [self.keys[row[0]] for row in rows]

    def answer(self, text: str) -> dict[str, list[str]]:
        """Each system's ranking: dense, bm25 and their rrf."""
        dense, bm25 = self.dense(text), self.bm25(text)
        score: defaultdict[str, float] = defaultdict(float)
        for ranking in (dense, bm25):
            for rank, key in enumerate(ranking, 1):
                score[key] += 1.0 / (RRF_K + rank)
        rrf = sorted(score, key=lambda key: -score[key])
        return {"dense": dense, "bm25": bm25, "rrf": rrf}
