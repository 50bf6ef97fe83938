"""The one exception tree of Retold.

::

    RetoldError
    ├── ConfigError            bad config.yaml or overrides; the message names the key
    │   └── EmbeddingMismatchError the store holds vectors of another embedding family
    ├── StoreError             the SQLite store cannot be used
    │   ├── NotADatabaseError      the file is not a SQLite database (left untouched)
    │   ├── SchemaTooNewError      written by a newer Retold (left untouched)
    │   └── MigrationIssuesError   legacy rows need review before use
    └── ModelError             an embedding or other local model failed to load or run

Structured tool errors (``invalid_input``, ``not_found``, ...) are data returned by the
tool handlers, not exceptions: a refused call changes nothing and tells the model what to
fix (see ``docs/decisions.md``, "Tool results and error parity").
"""

from __future__ import annotations


class RetoldError(Exception):
    """Root of every error Retold raises on purpose."""


class ConfigError(RetoldError):
    """A configuration value is unknown, mistyped or out of range."""


class EmbeddingMismatchError(ConfigError):
    """The configured embedder is not the family the store's vectors belong to."""


class StoreError(RetoldError):
    """The store cannot be opened or used."""


class NotADatabaseError(StoreError):
    """The store path holds something that is not a SQLite database."""


class SchemaTooNewError(StoreError):
    """The store was written by a newer schema version than this code knows."""


class MigrationIssuesError(StoreError):
    """Legacy rows could not be mapped by a migration and need an operator."""


class ModelError(RetoldError):
    """A local model could not be loaded or failed while running."""
