"""The one exception tree of Retold.

::

    RetoldError
    ├── ConfigError            bad config.yaml or overrides; the message names the key
    │   └── EmbeddingMismatchError the store holds vectors of another embedding family
    ├── StoreError             the SQLite store cannot be used
    │   ├── StoreMissingError      no store there yet: no file, or a database without Retold's schema
    │   ├── NotADatabaseError      not SQLite, or another application's database (left untouched)
    │   ├── SchemaTooNewError      written by a newer Retold (left untouched)
    │   ├── MigrationIssuesError   legacy rows need review before use
    │   ├── StoreLockedError       another connection held the write lock past the wait
    │   ├── StoreReadOnlyError     the file, its folder or the config forbids writing
    │   ├── StoreFullError         the disk (or the database's size limit) is full
    │   └── StoreCorruptError      SQLite found damaged pages
    ├── ModelError             an embedding or other local model failed to load or run
    │   └── ModelMissingError      the configured model's files are not where it says
    ├── ExtractionError        a session's extraction applied nothing: failed, not configured or parked
    └── GoldenSetError         a golden-set file is malformed, changed after freezing, or refuses a change

Every store error leaves the file as it was: a refused write has rolled back. Their
messages are one line that says what to do, and never suggest deleting a store that is
merely busy or read-only.

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


class StoreMissingError(StoreError):
    """There is no store where one was looked for: no file at the path, or a PostgreSQL
    database without Retold's schema. Opening it would create one; a check has nothing
    to read."""


class NotADatabaseError(StoreError):
    """The store path holds something that is not a Retold store: not SQLite at all, or
    another application's SQLite database."""


class SchemaTooNewError(StoreError):
    """The store was written by a newer schema version than this code knows."""


class MigrationIssuesError(StoreError):
    """Legacy rows could not be mapped by a migration and need an operator."""


class StoreLockedError(StoreError):
    """Another connection kept the write lock for longer than the busy timeout."""


class StoreReadOnlyError(StoreError):
    """A write reached a store opened read-only (by config, or because the file or its
    folder cannot be written); reads keep working."""


class StoreFullError(StoreError):
    """A write ran out of disk space (or hit the database's page limit) and rolled back."""


class StoreCorruptError(StoreError):
    """SQLite reported damaged pages or a file that stopped being a database."""


class ModelError(RetoldError):
    """A local model could not be loaded or failed while running."""


class ModelMissingError(ModelError):
    """The configured model's package, folder or files are missing, found before any
    tool call would try to load it."""


class ExtractionError(RetoldError):
    """A session's extraction ran and applied nothing: it failed, found no hosted model,
    or the session is parked after its last allowed attempt. A worker task raises it so
    the task ends in the FAILURE state with the reason, instead of a success."""


class GoldenSetError(RetoldError):
    """A golden-set file cannot be used as asked: it is not a golden set, its content no
    longer matches the hash it was frozen with, or it refuses a change (a frozen set takes
    no new label). The message is one line naming the file and what is wrong."""
