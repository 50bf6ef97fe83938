"""Retold: durable, scoped, evidence-backed memory for AI agents.

The public surface is documented in README.md ("Use it from Python"). Importing this
package loads no model and never imports torch.
"""

from retold.config import Config
from retold.config.env import load_config
from retold.errors import (
    ConfigError,
    EmbeddingMismatchError,
    MigrationIssuesError,
    ModelError,
    ModelMissingError,
    NotADatabaseError,
    RetoldError,
    SchemaTooNewError,
    StoreCorruptError,
    StoreError,
    StoreFullError,
    StoreLockedError,
    StoreMissingError,
    StoreReadOnlyError,
)
from retold.models import Principal, Record, Scope, SearchRequest
from retold.runtime import Runtime, build_runtime

__version__ = "0.1.0"

__all__ = [
    "Config",
    "ConfigError",
    "EmbeddingMismatchError",
    "MigrationIssuesError",
    "ModelError",
    "ModelMissingError",
    "NotADatabaseError",
    "Principal",
    "Record",
    "RetoldError",
    "Runtime",
    "Scope",
    "SchemaTooNewError",
    "SearchRequest",
    "StoreCorruptError",
    "StoreError",
    "StoreFullError",
    "StoreLockedError",
    "StoreMissingError",
    "StoreReadOnlyError",
    "__version__",
    "build_runtime",
    "load_config",
]
