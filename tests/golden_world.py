"""A small deployment whose search log a golden set is captured from: two users and a
project, a superseded fact, an open conflict, and the searches their agent made.

``build`` writes the records through the real write path (fakes only at the model
boundaries), runs the searches, and writes a config file the ``retold`` command opens the
same store with. The clock is set to now, so records still live when a later command runs
on the system clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import yaml

from retold.config import config_to_dict
from retold.models import Principal, Scope, SearchRequest
from retold.testing import AGENT, World, make_world

__all__ = ["QUESTIONS", "GoldenWorld", "build"]

ADITYA, MEI, ATLAS = Scope("user", "aditya"), Scope("user", "mei"), Scope("project", "atlas")

# (key, user, project, question)
QUESTIONS: tuple[tuple[str, str, str | None, str], ...] = (
    ("drink", "aditya", None, "what does Aditya drink with breakfast?"),
    ("manager", "aditya", None, "who is Aditya's manager?"),
    ("billing", "aditya", None, "who is the billing contact for Acme North?"),
    ("phone", "aditya", None, "what is Aditya's phone number?"),
    ("tower", "aditya", None, "how tall is the Eiffel tower?"),
    ("deploy", "aditya", "atlas", "when does the Atlas deploy run?"),
    ("cat", "mei", None, "what is the name of Mei's cat?"),
    ("allergy", "mei", None, "which allergy does Mei have?"),
)


@dataclass
class GoldenWorld:
    world: World
    config: Path  # a config file for the CLI: this store, the fake embedder, the test gate
    ids: dict[str, str] = field(default_factory=dict)  # record key -> id
    scores: dict[str, float] = field(default_factory=dict)  # question key -> answer score, when read

    def principal(self, user: str, project: str | None = None) -> Principal:
        return Principal(AGENT, user, f"s-{user}", project)

    def ask(self, user: str, question: str, project: str | None = None) -> list[str]:
        """One logged search through the tool, as the agent for ``user``; the ids returned."""
        who = self.principal(user, project)
        out = self.world.rt.tools.call("memory_search", who, {"queries": [question]})
        return [hit["id"] for hit in out["results"]]

    def answer_scores(self) -> dict[str, float]:
        """Each question's answer-or-abstain score, from searches that leave no log row."""
        retriever = self.world.rt.comparison_retriever()
        try:
            return {key: float(retriever.search(self.principal(user, project), SearchRequest([question]))
                               .response.decision["score"])  # type: ignore[arg-type]
                    for key, user, project, question in QUESTIONS}
        finally:
            retriever.close()

    def ask_all(self) -> dict[str, list[str]]:
        found = {key: self.ask(user, question, project) for key, user, project, question in QUESTIONS}
        self.world.rt.flush_search_log()
        return found


def build(tmp_path: Path, store: str) -> GoldenWorld:
    """The deployment on ``store`` (a SQLite path or a PostgreSQL URL), searched once."""
    world = make_world(tmp_path, store=store)
    world.clock.set(datetime.now(UTC).replace(microsecond=0))
    rt = world.rt
    rt.host.grant(AGENT, MEI, read=True, write=True)
    rt.host.provision_user("mei", aliases=["Mei"])
    rt.host.grant(AGENT, ATLAS, read=True, write=True)
    gw = GoldenWorld(world, tmp_path / "golden-config.yaml")
    aditya, mei = gw.principal("aditya"), gw.principal("mei")
    atlas = gw.principal("aditya", "atlas")

    def write(key: str, who: Principal, scope: Scope, content: str, attribute: str,
              source: str = "system", about: tuple[str, str] | None = None) -> None:
        entities = [(about[0], about[1], "about")] if about else []
        # The host's own writes (a CRM sync, say): a system source needs no quoted turn.
        result = world.write(who, origin="host", content=content, attribute=attribute, source_kind=source,
                             target=scope, entities=entities)
        assert result.record_id is not None, result
        gw.ids[key] = result.record_id

    write("drink", aditya, ADITYA, "Aditya drinks green tea with breakfast.", "breakfast_drink")
    write("manager", aditya, ADITYA, "Aditya's manager is Farah Qureshi.", "manager")
    write("dana", aditya, ADITYA, "The billing contact for Acme North is Dana Reyes.", "billing_contact",
          about=("org", "Acme North"))
    world.clock.advance(hours=1)
    write("marcus", aditya, ADITYA, "The billing contact for Acme North is Marcus Chen.", "billing_contact",
          about=("org", "Acme North"))
    write("phone", aditya, ADITYA, "Aditya's phone number is 555-0100.", "phone_number")
    # A weaker source under the same attribute: kept beside it as an open conflict.
    write("phone_guess", aditya, ADITYA, "Aditya's phone number is 555-0199.", "phone_number",
          source="agent_inference")
    write("deploy", atlas, ATLAS, "The Atlas deploy runs on Friday mornings.", "deploy_day",
          about=("project", "Atlas"))
    write("cat", mei, MEI, "Mei's cat is named Miso.", "cat_name")
    settings = config_to_dict(rt.config)
    store_key = "url" if rt.config.store.url else "path"
    gw.config.write_text(yaml.safe_dump({
        "store": {store_key: rt.config.store.target},
        "embedding": settings["embedding"],
        "retrieval": {"gate": settings["retrieval"]["gate"]},  # type: ignore[index]
    }), encoding="utf-8")
    return gw
