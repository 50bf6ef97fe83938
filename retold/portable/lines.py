"""The export file: JSON lines, one object each.

The first line is the header: the format and store schema versions that wrote it, the
scope, the embedding family of any vectors it carries, the options and the counts. Then
one line per entity the records link, one per record (its columns, links with roles,
conflicts, activation, pin and vector), and with events one per event about them. Each
line says what it is in ``"line"``. Vectors are float32, little-endian, base64, so a file
read back on another machine gives the same numbers.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from retold.clock import to_iso
from retold.errors import RetoldError
from retold.models import Entity, Scope
from retold.store.family import EmbeddingFamily
from retold.store.migrations import LATEST
from retold.store.portable import PortableRecord

__all__ = ["FORMAT", "ExportHeader", "ImportRefused", "decode_vector", "dumps", "encode_vector",
           "entity_line", "header_line", "read_header", "record_line"]

FORMAT = 1  # the file format this code writes and the newest it reads


class ImportRefused(RetoldError):
    """The file as a whole cannot be imported (not an export, newer than this code, a
    scope the importer may not write); nothing was written."""


@dataclass(frozen=True)
class ExportHeader:
    format: int
    schema_version: int
    scope: Scope
    family: EmbeddingFamily | None
    counts: dict[str, int]
    tenant: str | None = None  # the tenant it was exported from; None in files from before tenants


def dumps(obj: dict[str, Any]) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def encode_vector(vector: np.ndarray) -> str:
    return base64.b64encode(np.ascontiguousarray(vector, dtype="<f4").tobytes()).decode("ascii")


def decode_vector(text: str, dims: int) -> np.ndarray:
    vector = np.frombuffer(base64.b64decode(text, validate=True), dtype="<f4").astype(np.float32)
    if vector.shape != (dims,):
        raise ValueError(f"vector has {vector.size} numbers, the header's family has {dims}")
    return vector


def header_line(scope: Scope, family: EmbeddingFamily | None, counts: dict[str, int], *,
                include_history: bool, include_events: bool, at: datetime, tenant: str) -> dict[str, Any]:
    return {"line": "header", "retold_export": FORMAT, "schema_version": LATEST, "tenant": tenant,
            "scope": str(scope),
            "embedding": None if family is None else {"model": family.model, "version": family.version,
                                                      "dims": family.dims},
            "include_history": include_history, "include_events": include_events, "counts": counts,
            "exported_at": to_iso(at)}


def entity_line(entity: Entity) -> dict[str, Any]:
    return {"line": "entity", "id": entity.id, "kind": entity.kind, "canonical": entity.canonical,
            "scope": str(entity.scope), "status": entity.status, "aliases": sorted(entity.aliases)}


def record_line(record: PortableRecord) -> dict[str, Any]:
    return {"line": "record", **record.columns, "links": [list(link) for link in record.links],
            "conflicts": record.conflicts, "activation": record.activation, "pinned": record.pinned,
            "vector": None if record.vector is None else encode_vector(record.vector)}


def read_header(text: str) -> ExportHeader:
    """The header of an export file; ImportRefused when the line is not one, or was
    written by a newer Retold than this one."""
    try:
        obj = json.loads(text)
    except ValueError:
        obj = None
    if not isinstance(obj, dict) or obj.get("line") != "header" or "retold_export" not in obj:
        raise ImportRefused("line 1 is not a Retold export header; nothing was imported")
    fmt, schema = obj.get("retold_export"), obj.get("schema_version")
    if not isinstance(fmt, int) or not isinstance(schema, int):
        raise ImportRefused("line 1: the header's retold_export and schema_version must be numbers")
    if fmt > FORMAT or schema > LATEST:
        raise ImportRefused(f"the file was written by a newer Retold (export format {fmt}, schema {schema});"
                            f" this one reads format {FORMAT} up to schema {LATEST}: upgrade Retold to"
                            " import it")
    try:
        scope = Scope.parse(str(obj.get("scope")))
        emb = obj.get("embedding")
        family = None if emb is None else EmbeddingFamily(str(emb["model"]), str(emb["version"]),
                                                           int(emb["dims"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise ImportRefused(f"line 1: the header is malformed ({exc}); nothing was imported") from None
    counts = obj["counts"] if isinstance(obj.get("counts"), dict) else {}
    tenant = obj.get("tenant")
    return ExportHeader(fmt, schema, scope, family, {str(k): int(v) for k, v in counts.items()},
                        None if tenant is None else str(tenant))
