"""The memory pack: one tenant's memory policies, as typed data.

A pack file holds a ``default:`` pack and, under ``tenants:``, a partial pack per tenant
that overrides it key by key; Retold's built-in pack sits below both. Every tenant runs
the same pipeline code and only the values differ, so a customer's policy is data that
can be checked, diffed and shown, never a branch in the code.

The file is checked whole when it is loaded: an unknown key, a value of the wrong type or
out of its bounds, an undeclared sensitivity class or a pattern that does not compile is
refused with one :class:`~retold.errors.ConfigError` line naming the dotted key (several
problems are joined with ``; ``). A tenant's override is checked both on its own and
merged, since two valid layers can add up to an invalid pack (shares over 100%).

The built-in values are today's behaviour: every class on, only episodic records decay
(as ``retrieval.freshness.episodic_half_life_days`` does), transcripts kept as long as
``sessions.retain_days`` keeps them, no redaction. A few pack keys restate a config key
(:data:`CONFIG_TWINS`); :func:`resolve_with_config` settles them for one runtime: a value
a pack file sets wins, a built-in one defers to the config, so a tenant no pack file
speaks for runs exactly as the config says. The governance block's sensitivity classes and
redaction act through :mod:`retold.policy.sensitivity`.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import types
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Union, get_args, get_origin, get_type_hints

import yaml

from retold.errors import ConfigError
from retold.tenant import DEFAULT_TENANT, check_tenant

if TYPE_CHECKING:
    from retold.config import Config

__all__ = [
    "BUILTIN_PACK",
    "CONFIG_TWINS",
    "RECORD_CLASSES",
    "ClassPolicies",
    "ClassPolicy",
    "EffectivePack",
    "Governance",
    "MemoryPack",
    "PackFile",
    "PackLeaf",
    "ProceduralPolicy",
    "RecordClass",
    "RetrievalOverrides",
    "SensitivityClass",
    "WritePolicy",
    "effective_pack",
    "is_class_name",
    "load_pack_file",
    "pack_for_config",
    "resolve_with_config",
]

RecordClass = Literal["semantic", "episodic", "procedural", "raw"]
RECORD_CLASSES: tuple[RecordClass, ...] = get_args(RecordClass)
ConflictRule = Literal["supersede_on_newer_source", "hold"]
ContradictionAction = Literal["hold_and_flag", "supersede"]
ErasureMode = Literal["cascade_to_derived", "record_only"]
DecidedBy = Literal["extractor_label", "category", "pattern"]

BUILT_IN = "built-in"
PACK_DEFAULT = "pack default"
NO_CLASS = "none"  # the sensitivity class of every record no other class claims


@dataclass(frozen=True, slots=True)
class _Bound:
    """The closed (or, at ``low``, open) interval a number must lie in."""

    low: float
    high: float = math.inf
    open_low: bool = False


def _bounded(default: object, low: float, high: float = math.inf, *, open_low: bool = False) -> Any:
    return field(default=default, metadata={"bound": _Bound(low, high, open_low)})


@dataclass(frozen=True, slots=True)
class ClassPolicy:
    """``classes.<type>:`` - how one record class is kept, ranked and extracted."""

    enabled: bool = True
    # Days for a record's ranking weight to halve with age; null = stable (no decay).
    half_life_days: float | None = _bounded(None, 0.0, open_low=True)
    # The class's reserved share of the search token budget; null = no reserved share, it
    # competes for what the other shares leave, as every class does today.
    retrieval_budget_pct: float | None = _bounded(None, 0.0, 100.0)
    # Extracted candidates of this class below this confidence are dropped; 0 keeps all.
    extraction_confidence_floor: float = _bounded(0.0, 0.0, 1.0)
    retention_days: int | None = _bounded(None, 1.0)  # null = keep


@dataclass(frozen=True, slots=True)
class ProceduralPolicy(ClassPolicy):
    """``classes.procedural:`` - a class policy, plus how standing instructions evolve."""

    versioned: bool = True  # a superseded instruction stays as history, as records do today
    # A standing instruction repeated in this many separate sessions becomes a procedural
    # record; null = never promoted (today's behaviour). One repeat is no pattern, so >= 2.
    promote_after_repeats: int | None = _bounded(None, 2.0)


@dataclass(frozen=True, slots=True)
class ClassPolicies:
    """``classes:`` - one policy per record class; ``raw`` is the session transcripts."""

    semantic: ClassPolicy = field(default_factory=ClassPolicy)
    episodic: ClassPolicy = field(default_factory=lambda: ClassPolicy(half_life_days=30.0))
    procedural: ProceduralPolicy = field(default_factory=ProceduralPolicy)
    raw: ClassPolicy = field(default_factory=lambda: ClassPolicy(retention_days=90))

    def of(self, record_class: RecordClass) -> ClassPolicy:
        """The policy of ``record_class``."""
        policy: ClassPolicy = getattr(self, record_class)
        return policy

    def keeps_history(self, record_class: str) -> bool:
        """Whether a superseded record of ``record_class`` stays as history; only
        instructions may be replaced outright (``procedural.versioned: false``)."""
        return record_class != "procedural" or self.procedural.versioned


@dataclass(frozen=True, slots=True)
class RetrievalOverrides:
    """``retrieval:`` - per-tenant overrides of the search settings; null = the config's.

    The bounds keep a tenant from switching safety off: an envelope too small to hold one
    record, or so large it swamps the agent's context, is refused, as is a floor outside
    the scale the reranker scores on."""

    token_budget: int | None = _bounded(None, 200.0, 8000.0)  # overrides retrieval.token_budget
    relevance_floor: float | None = _bounded(None, 0.0, 1.0)  # overrides reranker.floor


@dataclass(frozen=True, slots=True)
class WritePolicy:
    """``write_policy:`` - what a write does when it meets a record it disagrees with."""

    # supersede_on_newer_source: the more authoritative (then newer) source wins, as
    # today; hold: the incoming record waits in review.
    conflict_rule: ConflictRule = "supersede_on_newer_source"
    # hold_and_flag: both records go to review; supersede: the authority rule decides.
    contradiction_action: ContradictionAction = "supersede"
    review_sample_rate: float = _bounded(0.0, 0.0, 1.0)  # share of writes also sent to review


@dataclass(frozen=True, slots=True)
class SensitivityClass:
    """One entry of ``governance.sensitivity_classes``: a name and how a record gets it.

    ``extractor_label``: the extractor labels the record with this name; ``category``: the
    record's category is this name; ``pattern``: its text matches ``pattern``."""

    name: str
    decided_by: DecidedBy = "extractor_label"
    pattern: str | None = None


@dataclass(frozen=True, slots=True)
class Governance:
    """``governance:`` - sensitivity classes, redaction, erasure and the audit trail."""

    sensitivity_classes: tuple[SensitivityClass, ...] = (SensitivityClass(NO_CLASS),)
    redact_before_embedding: tuple[str, ...] = ()  # declared classes whose text is masked first
    erasure: ErasureMode = "record_only"  # today an erase takes the one record, not what it fed
    # Days an audit event keeps the text in its payload (then ids, outcomes and counts
    # only), today's retention.event_payload_days.
    audit_retention_days: int = _bounded(90, 1.0)

    def class_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.sensitivity_classes)


@dataclass(frozen=True, slots=True)
class MemoryPack:
    """One tenant's whole memory policy."""

    classes: ClassPolicies = field(default_factory=ClassPolicies)
    retrieval: RetrievalOverrides = field(default_factory=RetrievalOverrides)
    write_policy: WritePolicy = field(default_factory=WritePolicy)
    governance: Governance = field(default_factory=Governance)


_PROCEDURAL_ONLY = {f.name for f in dataclasses.fields(ProceduralPolicy)} - {
    f.name for f in dataclasses.fields(ClassPolicy)}

BUILTIN_PACK = MemoryPack()
"""The pack of a tenant no file speaks for: Retold's behaviour before packs existed."""


@dataclass(frozen=True, slots=True)
class PackLeaf:
    """One setting of an effective pack: its dotted key, its typed value (a list is a
    tuple), and the layer that set it (``built-in``, ``pack default`` or ``tenant <name>``)."""

    key: str
    value: object
    source: str


@dataclass(frozen=True, slots=True)
class EffectivePack:
    """The pack one tenant runs under, and where each of its values came from."""

    tenant: str
    pack: MemoryPack
    leaves: tuple[PackLeaf, ...]

    def source(self, key: str) -> str:
        """The layer that set dotted ``key`` (KeyError for a key that is no setting)."""
        for leaf in self.leaves:
            if leaf.key == key:
                return leaf.source
        raise KeyError(key)

    def sources(self) -> dict[str, str]:
        return {leaf.key: leaf.source for leaf in self.leaves}


@dataclass(frozen=True, slots=True)
class PackFile:
    """A checked pack file: the default pack and every tenant's merged pack."""

    path: str
    default: EffectivePack
    overrides: Mapping[str, EffectivePack]

    def effective(self, tenant: str) -> EffectivePack:
        """``tenant``'s pack: its override merged over the default, else the default."""
        tenant = check_tenant(tenant, "tenant")
        found = self.overrides.get(tenant)
        return found if found is not None else dataclasses.replace(self.default, tenant=tenant)


def load_pack_file(path: str | os.PathLike[str]) -> PackFile:
    """Read and check the pack file at ``path``; one ConfigError line names every bad key."""
    shown = os.fspath(path)
    document = _read(shown)
    errors: list[str] = []
    for name in document:
        if name not in ("default", "tenants"):
            errors.append(f"{name}: unknown key (a memory pack file has default: and tenants:)")
    base = _plain(BUILTIN_PACK)
    default_layer = _check_block(MemoryPack, document.get("default"), "default", errors)
    tenants = document.get("tenants")
    layers: dict[str, dict[str, Any]] = {}
    if tenants is not None and not isinstance(tenants, Mapping):
        errors.append(f"tenants: must be a mapping of tenant name to pack, got {_kind(tenants)}")
    elif tenants:
        for name, layer in tenants.items():
            try:
                check_tenant(name, f"tenants.{name}")
            except ConfigError as bad:
                errors.append(str(bad))
                continue
            layers[name] = _check_block(MemoryPack, layer, f"tenants.{name}", errors)
    _raise(shown, errors)

    sources = {key: BUILT_IN for key in _leaf_keys(base)}
    default_plain = _merge(base, default_layer, PACK_DEFAULT, sources, "")
    default = _effective("default", default_plain, sources, "default", errors)
    _raise(shown, errors)  # else every tenant would repeat what is wrong with the default
    overrides: dict[str, EffectivePack] = {}
    for name, layer in layers.items():
        own = dict(sources)
        merged = _merge(default_plain, layer, f"tenant {name}", own, "")
        overrides[name] = _effective(name, merged, own, f"tenants.{name}", errors)
    _raise(shown, errors)
    return PackFile(shown, default, overrides)


@dataclass(frozen=True, slots=True)
class ConfigTwin:
    """A pack key that restates a config key. ``null_defers``: the pack's null means "the
    config's value" (a retrieval override) rather than a setting of its own (no decay,
    kept for ever), which the config cannot say."""

    key: str
    config_path: tuple[str, ...]
    null_defers: bool


CONFIG_TWINS: tuple[ConfigTwin, ...] = (
    ConfigTwin("classes.episodic.half_life_days",
               ("retrieval", "freshness", "episodic_half_life_days"), False),
    ConfigTwin("classes.raw.retention_days", ("sessions", "retain_days"), False),
    ConfigTwin("governance.audit_retention_days", ("retention", "event_payload_days"), False),
    ConfigTwin("retrieval.token_budget", ("retrieval", "token_budget"), True),
    ConfigTwin("retrieval.relevance_floor", ("reranker", "floor"), True),
)


def resolve_with_config(effective: EffectivePack, config: Config) -> tuple[Config, MemoryPack]:
    """The config and the pack one runtime runs under, agreeing on every twin key.

    A twin the pack file sets (its default or the tenant's layer) wins and is written into
    the config, so the parts that read the config act on it too; a built-in twin takes the
    config's value, so without a pack file nothing differs from the config. A set null the
    config cannot hold (no decay, keep for ever) stays in the pack only."""
    pack = effective.pack
    overrides: dict[str, Any] = {}
    for twin in CONFIG_TWINS:
        value = _lookup(pack, twin.key)
        if effective.source(twin.key) == BUILT_IN or (value is None and twin.null_defers):
            configured: object = config
            for part in twin.config_path:
                configured = getattr(configured, part)
            pack = _replace_leaf(pack, twin.key.split("."), configured)
        elif value is not None:
            node = overrides
            for part in twin.config_path[:-1]:
                node = node.setdefault(part, {})
            node[twin.config_path[-1]] = value
    return (config.replace(overrides) if overrides else config), pack


def pack_for_config(config: Config) -> MemoryPack:
    """The built-in pack under ``config``: what a part built without a pack runs under."""
    plain = _plain(BUILTIN_PACK)
    builtin = _effective(DEFAULT_TENANT, plain, {key: BUILT_IN for key in _leaf_keys(plain)}, "", [])
    return resolve_with_config(builtin, config)[1]


def _replace_leaf(node: Any, parts: list[str], value: object) -> Any:
    if len(parts) == 1:
        return dataclasses.replace(node, **{parts[0]: value})
    return dataclasses.replace(node, **{parts[0]: _replace_leaf(getattr(node, parts[0]), parts[1:], value)})


def effective_pack(pack_file: str | os.PathLike[str] | None, tenant: str) -> EffectivePack:
    """``tenant``'s merged pack from ``pack_file`` (the built-in pack when None), with the
    source of every value. A tenant the file does not name gets its default pack."""
    if pack_file is None:
        tenant = check_tenant(tenant, "tenant")
        plain = _plain(BUILTIN_PACK)
        return _effective(tenant, plain, {key: BUILT_IN for key in _leaf_keys(plain)}, "", [])
    return load_pack_file(pack_file).effective(tenant)


# -- reading and checking ------------------------------------------------------------------------


class _Invalid(Exception):
    """One value failed its check; the message is the error line."""


def _read(shown: str) -> Mapping[str, Any]:
    try:
        text = Path(shown).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{shown}: memory pack file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{shown}: cannot read the memory pack file: {exc}") from exc
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" at line {where.line + 1}" if where is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ConfigError(f"{shown}: not valid YAML{line}: {problem}") from exc
    if document is None:
        return {}  # an empty file: every tenant gets the built-in pack
    if not isinstance(document, Mapping):
        raise ConfigError(f"{shown}: a memory pack file must be a mapping with default: and tenants:, "
                          f"got {_kind(document)}")
    return document


def _raise(shown: str, errors: list[str]) -> None:
    # Key first, as a config error reads; the file last, since the runtime names no file.
    if errors:
        raise ConfigError("; ".join(" ".join(e.split()) for e in errors) + f" (memory pack {shown})")


def _kind(value: object) -> str:
    """``value`` as the error shows it: as written for a scalar, else its kind as well."""
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, int | float | str):
        return repr(value)
    return f"a {type(value).__name__} ({value!r})"


@cache
def _hints(cls: type) -> dict[str, Any]:
    return get_type_hints(cls)


def _check_block(cls: type, data: object, key: str, errors: list[str]) -> dict[str, Any]:
    """The keys ``data`` sets in block ``cls``, checked and in plain form; an empty or null
    block sets nothing. Every problem is appended to ``errors``."""
    if data is None:
        return {}
    if not isinstance(data, Mapping):
        errors.append(f"{key}: must be a mapping of keys, got {_kind(data)}")
        return {}
    fields = {f.name: f for f in dataclasses.fields(cls)}
    out: dict[str, Any] = {}
    for name, value in data.items():
        sub = f"{key}.{name}"
        if name not in fields:
            near = difflib.get_close_matches(str(name), list(fields), n=1)
            hint = f" (did you mean {near[0]!r}?)" if near else ""
            if cls is ClassPolicy and name in _PROCEDURAL_ONLY:
                hint = " (only classes.procedural has it)"
            errors.append(f"{sub}: unknown key{hint}")
            continue
        hint = _hints(cls)[name]
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            out[name] = _check_block(hint, value, sub, errors)
        elif name == "sensitivity_classes":
            out[name] = _check_sensitivity(value, sub, errors)
        else:
            try:
                out[name] = _check_value(hint, fields[name].metadata.get("bound"), value, sub)
            except _Invalid as bad:
                errors.append(str(bad))
    return out


def _check_value(hint: Any, bound: _Bound | None, value: object, key: str) -> object:
    """``value`` in plain form when it fits ``hint`` and ``bound``, else _Invalid."""
    nullable = get_origin(hint) in (Union, types.UnionType) and type(None) in get_args(hint)
    if nullable:
        (hint,) = [a for a in get_args(hint) if a is not type(None)]
        if value is None:
            return None
    wanted = _wanted(hint, bound) + (" or null" if nullable else "")
    bad = _Invalid(f"{key}: must be {wanted}, got {_kind(value)}")
    if get_origin(hint) is Literal:
        if value not in get_args(hint):
            raise bad
        return value
    if get_origin(hint) is tuple:  # a list of names
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise bad
        return list(value)
    if hint is bool or hint is str:
        if not isinstance(value, hint):
            raise bad
        return value
    # bool is an int in Python, but `half_life_days: true` is a mistake, not 1.
    if isinstance(value, bool) or not isinstance(value, int if hint is int else int | float):
        raise bad
    if not math.isfinite(value) or (bound is not None and not _within(bound, value)):
        raise bad
    return float(value) if hint is float else value


def _within(bound: _Bound, value: float) -> bool:
    above = value > bound.low if bound.open_low else value >= bound.low
    return above and value <= bound.high


def _wanted(hint: Any, bound: _Bound | None) -> str:
    """What a value of ``hint`` within ``bound`` must be, in words."""
    if get_origin(hint) is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(hint))
    if get_origin(hint) is tuple:
        return "a list of names"
    if hint is bool:
        return "true or false"
    if hint is str:
        return "a string"
    noun = "integer" if hint is int else "number"
    if bound is None:
        return f"a {noun}"
    if bound.high == math.inf and ((bound.open_low and bound.low == 0) or (hint is int and bound.low == 1)):
        return f"a positive {noun}"
    article = "an" if hint is int else "a"
    if bound.high == math.inf:
        return f"{article} {noun} of at least {bound.low:g}"
    return f"{article} {noun} from {bound.low:g} to {bound.high:g}"


_CLASS_NAME = re.compile(r"[a-z][a-z0-9_]{0,31}")


def is_class_name(name: object) -> bool:
    """Whether ``name`` could name a sensitivity class in some pack: 1-32 lower-case
    letters, digits or ``_``, starting with a letter."""
    return isinstance(name, str) and _CLASS_NAME.fullmatch(name) is not None


def _check_sensitivity(value: object, key: str, errors: list[str]) -> list[dict[str, Any]]:
    """``governance.sensitivity_classes``: a list whose items are a bare name (decided by
    the extractor's label) or ``{name, decided_by, pattern}``. A layer's list replaces the
    one below it whole, so a tenant states its full set and cannot drop ``none`` by
    accident: the merged pack is checked for it."""
    if not isinstance(value, list):
        errors.append(f"{key}: must be a list of sensitivity classes, got {_kind(value)}")
        return []
    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, item in enumerate(value):
        at = f"{key}[{i}]"
        entry = {"name": item} if isinstance(item, str) else item
        if not isinstance(entry, Mapping):
            errors.append(f"{at}: must be a name or a mapping with name, decided_by and pattern, "
                          f"got {_kind(item)}")
            continue
        before = len(errors)
        checked = _check_block(SensitivityClass, entry, at, errors)
        if len(errors) > before:
            continue
        name = checked.get("name")
        if not isinstance(name, str):
            errors.append(f"{at}.name: required")
            continue
        if not is_class_name(name):
            errors.append(f"{at}.name: must be 1-32 lower-case letters, digits or '_', starting with a "
                          f"letter, got {name!r}")
            continue
        if name in seen:
            errors.append(f"{at}.name: {name!r} is declared twice")
            continue
        seen.add(name)
        decided_by = checked.get("decided_by", "extractor_label")
        pattern = checked.get("pattern")
        if name == NO_CLASS and ("decided_by" in entry or "pattern" in entry):
            errors.append(f"{at}: 'none' is the class of every record no other class claims, so it "
                          "takes no decided_by or pattern")
            continue
        if decided_by == "pattern":
            if pattern is None:
                errors.append(f"{at}.pattern: required when decided_by is 'pattern'")
                continue
            try:
                re.compile(pattern)
            except re.error as exc:
                errors.append(f"{at}.pattern: does not compile as a regular expression: {exc}")
                continue
        elif pattern is not None:
            errors.append(f"{at}.pattern: only read when decided_by is 'pattern', not {decided_by!r}")
            continue
        out.append({"name": name, "decided_by": decided_by, "pattern": pattern})
    return out


# -- layers --------------------------------------------------------------------------------------


def _plain(pack: object) -> dict[str, Any]:
    """A typed block as nested dicts, with lists where the dataclass holds tuples."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(pack):  # type: ignore[arg-type]
        value = getattr(pack, f.name)
        if dataclasses.is_dataclass(value):
            out[f.name] = _plain(value)
        elif isinstance(value, tuple):
            out[f.name] = [_plain(v) if dataclasses.is_dataclass(v) else v for v in value]
        else:
            out[f.name] = value
    return out


def _leaf_keys(plain: Mapping[str, Any], prefix: str = "") -> list[str]:
    keys: list[str] = []
    for name, value in plain.items():
        key = f"{prefix}.{name}" if prefix else name
        keys.extend(_leaf_keys(value, key) if isinstance(value, dict) else [key])
    return keys


def _merge(base: Mapping[str, Any], layer: Mapping[str, Any], source: str,
           sources: dict[str, str], prefix: str) -> dict[str, Any]:
    """``layer`` over ``base`` key by key; each leaf it sets is recorded as ``source``."""
    out = dict(base)
    for name, value in layer.items():
        key = f"{prefix}.{name}" if prefix else name
        if isinstance(value, dict):
            out[name] = _merge(base[name], value, source, sources, key)
        else:
            out[name] = value
            sources[key] = source
    return out


def _build(cls: type, plain: Mapping[str, Any]) -> Any:
    values: dict[str, object] = {}
    for f in dataclasses.fields(cls):
        hint, value = _hints(cls)[f.name], plain[f.name]
        if dataclasses.is_dataclass(hint):
            value = _build(hint, value)  # type: ignore[arg-type]
        elif f.name == "sensitivity_classes":
            value = tuple(SensitivityClass(**v) for v in value)
        elif isinstance(value, list):
            value = tuple(value)
        values[f.name] = value
    return cls(**values)


def _effective(tenant: str, plain: Mapping[str, Any], sources: Mapping[str, str], key: str,
               errors: list[str]) -> EffectivePack:
    """The typed pack of ``plain``, after the checks that span keys (appended to ``errors``
    under ``key``, the layer that produced it)."""
    pack: MemoryPack = _build(MemoryPack, plain)
    prefix = f"{key}." if key else ""
    shares = [(c, pct) for c in RECORD_CLASSES
              if (policy := pack.classes.of(c)).enabled and (pct := policy.retrieval_budget_pct) is not None]
    total = sum(pct for _, pct in shares)
    if total > 100:
        listed = ", ".join(f"{c} {pct:g}" for c, pct in shares)
        errors.append(f"{prefix}classes: the enabled classes' retrieval_budget_pct add up to {total:g}, "
                      f"over 100 ({listed})")
    if not pack.classes.raw.enabled:
        # Extraction reads the transcript after the session ends, so a session with no
        # transcript would teach memory nothing; a short classes.raw.retention_days is the
        # way to keep transcripts briefly.
        errors.append(f"{prefix}classes.raw.enabled: must be true: extraction reads the session "
                      "transcript; set classes.raw.retention_days to keep it briefly instead")
    declared = pack.governance.class_names()
    if NO_CLASS not in declared:
        errors.append(f"{prefix}governance.sensitivity_classes: must declare 'none', the class of "
                      "records no other class claims")
    decided = {c.name: c.decided_by for c in pack.governance.sensitivity_classes}
    for name in pack.governance.redact_before_embedding:
        if name not in declared:
            errors.append(f"{prefix}governance.redact_before_embedding: {name!r} is not a declared "
                          f"sensitivity class (declared: {', '.join(declared)})")
        elif name == NO_CLASS or decided[name] != "pattern":
            # Only a pattern says which words to mask; masking a whole record's text instead
            # would leave nothing to find it by, so such a pack is refused, not guessed at.
            errors.append(f"{prefix}governance.redact_before_embedding: {name!r} is not decided by a "
                          "pattern, so it names no text to mask; only pattern classes can be redacted")
    leaves = tuple(PackLeaf(k, _lookup(pack, k), sources[k]) for k in _leaf_keys(plain))
    return EffectivePack(tenant, pack, leaves)


def _lookup(pack: MemoryPack, key: str) -> object:
    node: object = pack
    for part in key.split("."):
        node = getattr(node, part)
    return node
