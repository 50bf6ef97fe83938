"""Equivalence judges: same, contradicts or distinct for two claims.

Three implementations: an NLI cross-encoder, loaded only from local files; a
conservative exact judge used when no NLI model is available; and a table-driven fake
for tests. Nothing here imports torch or sentence-transformers at module import time.
"""

from __future__ import annotations

import logging
import os
import re
import unicodedata
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np
import numpy.typing as npt

from retold.errors import ConfigError, ModelError
from retold.index.local_models import LazyModel, load_local, predict_logits

if TYPE_CHECKING:
    from retold.config import EquivalenceConfig

Verdict = Literal["same", "contradicts", "distinct"]

log = logging.getLogger(__name__)


class EquivalenceJudge(Protocol):
    """Compares two claims. ``name`` is recorded on every write event it decides."""

    name: str

    def judge(self, a: str, b: str) -> Verdict: ...
    # The ingestor judges every scanned record before it decides anything, so
    # the judge takes the whole scan in one call.
    def judge_many(self, pairs: list[tuple[str, str]]) -> list[Verdict]: ...
    # None means "not scored": the caller keeps the claimed source and records
    # entailment: not_checked.
    def entails(self, premise: str, hypothesis: str) -> float | None: ...


# --- NLI cross-encoder -------------------------------------------------------------------

_LABEL_KEYS = ("entail", "contradict", "neutral")


def nli_label_columns(id2label: Mapping[int, str]) -> tuple[int, int]:
    """Return the ``(entailment, contradiction)`` output columns of an NLI model.

    The order differs between models, so it is read from the model config; labels that
    are not exactly entailment/contradiction/neutral raise ``ModelError``.
    """
    found = {key: [i for i, label in id2label.items() if key in str(label).casefold()]
             for key in _LABEL_KEYS}
    if len(id2label) != 3 or any(len(ids) != 1 for ids in found.values()):
        labels = ", ".join(repr(id2label[i]) for i in sorted(id2label))
        raise ModelError("not an NLI model: expected labels entailment, contradiction and "
                         f"neutral, found [{labels}]")
    return int(found["entail"][0]), int(found["contradict"][0])


def _softmax(logits: npt.ArrayLike) -> npt.NDArray[np.float64]:
    z = np.asarray(logits, dtype=np.float64)
    z = z - z.max(axis=1, keepdims=True)  # guard: exp of large logits overflows
    e = np.exp(z)
    out: npt.NDArray[np.float64] = e / e.sum(axis=1, keepdims=True)
    return out


class NLICrossEncoderJudge(LazyModel):
    """A local NLI cross-encoder that scores both directions.

    Loaded lazily and at most once, only from local files: a fresh install must never
    wait on a model hub.
    """

    def __init__(
        self, model: str, entail_floor: float, contradict_floor: float,
        batch_size: int = 32, device: str = "cpu",
    ) -> None:
        if batch_size < 1:
            raise ConfigError(f"equivalence judge batch_size: must be at least 1, got {batch_size}")
        self.model = model
        self.name = f"nli:{model}"
        self.entail_floor = entail_floor
        self.contradict_floor = contradict_floor
        self.batch_size = batch_size
        self.device = device
        LazyModel.__init__(self)
        self._entail_col = 0
        self._contradict_col = 0

    def _load(self) -> Any:
        model = load_local(
            "NLI", self.model, self.model, self.device,
            lambda st, device: st.CrossEncoder(self.model, device=device, local_files_only=True),
        )
        try:
            columns = nli_label_columns(dict(model.config.id2label))
        except ModelError as exc:
            raise ModelError(f"NLI model {self.model} is {exc}") from None
        self._entail_col, self._contradict_col = columns
        return model

    def _probabilities(self, pairs: list[tuple[str, str]]) -> npt.NDArray[np.float64]:
        """Softmax rows for ``pairs`` in one batched predict call."""
        self.load()
        # The verdict floors are defined on softmax probabilities, computed here.
        logits = predict_logits("NLI", self.model, self._model, pairs, self.batch_size)
        return _softmax(np.asarray(logits).reshape(len(pairs), -1))

    def judge(self, a: str, b: str) -> Verdict:
        """Judge one pair of claims; see ``judge_many``."""
        return self.judge_many([(a, b)])[0]

    def judge_many(self, pairs: list[tuple[str, str]]) -> list[Verdict]:
        """Judge each ``(a, b)`` pair, scoring a->b and b->a for all pairs in one batch."""
        if not pairs:
            return []
        n = len(pairs)
        probs = self._probabilities(list(pairs) + [(b, a) for a, b in pairs])
        forward, backward = probs[:n], probs[n:]
        verdicts: list[Verdict] = []
        for fwd, bwd in zip(forward, backward, strict=True):
            # Contradiction in either direction wins; "same" needs both
            # directed entailment scores at or above the floor.
            if max(fwd[self._contradict_col], bwd[self._contradict_col]) >= self.contradict_floor:
                verdicts.append("contradicts")
            elif min(fwd[self._entail_col], bwd[self._entail_col]) >= self.entail_floor:
                verdicts.append("same")
            else:
                verdicts.append("distinct")
        return verdicts

    def entails(self, premise: str, hypothesis: str) -> float | None:
        """The entailment probability of ``premise`` -> ``hypothesis``."""
        return float(self._probabilities([(premise, hypothesis)])[0, self._entail_col])


# --- exact judge -------------------------------------------------------------------------

_WS = re.compile(r"\s+")


def normalise_claim(text: str) -> str:
    """NFKC, casefold, collapse whitespace and drop trailing ``.``/``!``: the exact judge's key."""
    folded = _WS.sub(" ", unicodedata.normalize("NFKC", text).casefold()).strip()
    return folded.rstrip(".! ")


class ExactJudge:
    """Conservative fallback: normalised text equal -> ``same``, else ``distinct``.

    It never says ``contradicts`` and cannot score entailment.
    """

    name: str = "exact"

    def judge(self, a: str, b: str) -> Verdict:
        """``same`` when the normalised claims are equal, else ``distinct``."""
        return "same" if normalise_claim(a) == normalise_claim(b) else "distinct"

    def judge_many(self, pairs: list[tuple[str, str]]) -> list[Verdict]:
        """Judge each pair independently."""
        return [self.judge(a, b) for a, b in pairs]

    def entails(self, premise: str, hypothesis: str) -> float | None:
        """Always None (``not_checked``): text equality says nothing about entailment."""
        return None


# --- fake judge --------------------------------------------------------------------------

JudgeCall = tuple[Literal["judge", "judge_many", "entails"], str, str]


class FakeJudge:
    """Table-driven judge for tests.

    ``table`` gives verdicts, looked up as ``(a, b)`` then ``(b, a)``; ``entailment``
    gives directed scores. Every call is appended to ``calls`` as ``(kind, a, b)``, one
    entry per pair for ``judge_many``, so tests can assert what was judged and how.
    """

    name: str = "fake"

    def __init__(
        self,
        table: Mapping[tuple[str, str], Verdict] | None = None,
        entailment: Mapping[tuple[str, str], float] | None = None,
        default: Verdict = "distinct",
        default_entailment: float | None = 1.0,
    ) -> None:
        self.table: dict[tuple[str, str], Verdict] = dict(table or {})
        self.entailment: dict[tuple[str, str], float] = dict(entailment or {})
        self.default: Verdict = default
        self.default_entailment = default_entailment
        self.calls: list[JudgeCall] = []

    def _lookup(self, a: str, b: str) -> Verdict:
        found = self.table.get((a, b))
        if found is None:
            found = self.table.get((b, a))
        return self.default if found is None else found

    def judge(self, a: str, b: str) -> Verdict:
        """The table's verdict for the pair in either order, else ``default``."""
        self.calls.append(("judge", a, b))
        return self._lookup(a, b)

    def judge_many(self, pairs: list[tuple[str, str]]) -> list[Verdict]:
        """``judge`` for each pair, recorded as ``judge_many`` calls."""
        self.calls.extend(("judge_many", a, b) for a, b in pairs)
        return [self._lookup(a, b) for a, b in pairs]

    def entails(self, premise: str, hypothesis: str) -> float | None:
        """The directed score from ``entailment``, else ``default_entailment``."""
        self.calls.append(("entails", premise, hypothesis))
        return self.entailment.get((premise, hypothesis), self.default_entailment)


def judge_from_config(cfg: EquivalenceConfig, device: str = "cpu") -> EquivalenceJudge:
    """Build the judge ``ingestion.equivalence`` names.

    ``exact`` and ``fake`` select those judges. Any other name is an NLI model loaded
    now, offline; when it is not on this machine the exact judge decides instead, logged
    at debug level only, because that is how a fresh install runs and ``retold check``
    says so in words (:func:`judge_note`). A model that is here but fails to load is a
    warning (``docs/decisions.md``, "Choosing the judge without importing torch").
    """
    if cfg.model == "exact":
        return ExactJudge()
    if cfg.model == "fake":
        return FakeJudge()
    if not _locally_available(cfg.model):
        # Decided without importing torch: commands that never judge stay fast.
        log.debug("equivalence judge: exact, because NLI model %s is not a local folder and not in"
                  " the local Hugging Face cache", cfg.model)
        return ExactJudge()
    nli = NLICrossEncoderJudge(cfg.model, cfg.entail_floor, cfg.contradict_floor, device=device)
    try:
        nli.load()
    except ModelError as exc:
        log.warning("equivalence judge: using exact (normalised text equality) because %s", exc)
        return ExactJudge()
    log.info("equivalence judge: using %s", nli.name)
    return nli


def judge_note(cfg: EquivalenceConfig) -> str:
    """One line, in plain words, on the judge :func:`judge_from_config` would pick and
    what to do to get the NLI model, decided without loading anything."""
    if cfg.model == "fake":
        return "equivalence judge: fake (for tests: every pair of claims counts as distinct)"
    exact = ("two memories count as the same claim only when their words match, and no contradiction"
             " is inferred from meaning")
    if cfg.model == "exact":
        return f"equivalence judge: exact text (ingestion.equivalence.model: exact): {exact}"
    if not _locally_available(cfg.model):
        return (f"equivalence judge: exact text, because the NLI model {cfg.model} is not on this"
                f" machine: {exact}; to judge meaning, download it once (hf download {cfg.model}) or"
                " set ingestion.equivalence.model to a folder holding it (docs/models.md)")
    return f"equivalence judge: NLI model {cfg.model} (found on this machine; it loads on the first write)"


def _locally_available(model: str) -> bool:
    """A local model directory, or a hub name already in the Hugging Face cache."""
    if Path(model).expanduser().is_dir():
        return True
    if "/" not in model:
        return False
    hub = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME") or os.path.join(Path.home(), ".cache", "huggingface"), "hub"
    )
    return Path(hub, "models--" + model.replace("/", "--")).is_dir()
