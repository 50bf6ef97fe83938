"""Write grants and memory_write error outcomes, through the ingestor on a real store."""

from __future__ import annotations

from pathlib import Path

import pytest

from retold.models import Principal, Scope
from retold.policy.grants import readable_scopes
from retold.testing import ADITYA, AGENT, World, make_world
from tests.sql import fts_ids, rows

CONCISE = "Keep answers concise and technical."


def test_agent_reads_and_writes_its_private_scope_without_a_grant(tmp_path: Path, store_target: str) -> None:
    world = make_world(tmp_path, store=store_target, grant_personal=False)
    private = world.p.private_scope
    result = world.write(content="Prefers tabs.", attribute="indent", target=private,
                         entities=[("person", "Aditya", "about")])
    assert result.outcome == "created", result.note
    assert world.record(result.record_id).scope == private
    assert private in readable_scopes(world.rt.store, world.p)
    world.rt.close()


def test_user_scope_grant_is_not_honoured_for_another_user(world: World) -> None:
    vera = Principal(AGENT, "vera", "s2", None)
    world.rt.hooks.on_session_start(vera)
    result = world.write(vera, content="Aditya likes tea.", attribute="drink", target=ADITYA,
                         entities=[("person", "Aditya", "about")])
    assert result.outcome == "scope_not_writable"
    assert ADITYA not in readable_scopes(world.rt.store, vera)


def test_default_target_needs_a_provisioned_read_write_grant(tmp_path: Path, store_target: str) -> None:
    world = make_world(tmp_path, store=store_target, grant_personal=False)
    before = world.counts()
    refused = world.write(content="Prefers concise answers.", attribute="answer_style")
    assert refused.outcome == "scope_not_writable" and refused.record_id is None
    assert world.counts() == before
    world.rt.host.grant(AGENT, ADITYA, read=True, write=True)
    landed = world.write(content="Prefers concise answers.", attribute="answer_style")
    assert landed.outcome == "created"
    assert world.record(landed.record_id).scope == ADITYA
    world.rt.close()


def test_user_record_never_reaches_another_user_through_any_channel(world: World) -> None:
    text = "Aditya's deploy key lives in vault path kv/aditya-deploy."
    world.say("user", text)
    written = world.write(content=text, attribute="deploy_key", source_kind="user_statement",
                          evidence=text, entities=[("person", "Aditya", "about")])
    assert written.outcome == "created"
    vera = Principal(AGENT, "vera", "s2", None)
    store, index = world.rt.store, world.rt.index
    for principal, visible in ((world.p, True), (vera, False)):
        eligible = store.eligible_ids(readable_scopes(store, principal))
        dense = {rid for rid, _ in index.search(world.embedder.embed_queries([text])[0], eligible, 5)}
        lexical = fts_ids(store, "vault") & eligible.as_set()
        entity = {r[0] for r in rows(
            store, "SELECT re.record_id FROM record_entities re JOIN entity_aliases a"
            " ON a.entity_id = re.entity_id WHERE a.alias_norm = 'aditya'")} & eligible.as_set()
        for channel in (dense, lexical, entity):
            assert (written.record_id in channel) is visible


def test_invalid_write_target_names_the_label(world: World) -> None:
    result = world.write(content="Uses trunk-based development.", attribute="branching",
                         target="current_project")
    assert result.outcome == "invalid_write_target"
    assert "current_project" in (result.note or "")


def test_project_target_offered_only_when_writable(world: World) -> None:
    world.rt.host.grant(AGENT, Scope("project", "retold"), read=True, write=True)
    principal = Principal(AGENT, "aditya", "s1", "retold")
    result = world.write(principal, content="Commits follow Conventional Commits.",
                         attribute="commit_convention", target="current_project",
                         entities=[("project", "Retold", "about")])
    assert result.outcome == "created", result.note
    assert world.record(result.record_id).scope == Scope("project", "retold")


@pytest.mark.parametrize(
    ("fields", "code", "needle"),
    [
        ({"source_kind": "session_summary"}, "invalid_source_kind", "session_summary"),
        ({"source_kind": "system"}, "invalid_source_kind", "system"),
        ({"attribute": None}, "invalid_subject", "attribute required"),
        ({"attribute": "  !!  "}, "invalid_subject", "attribute normalizes to nothing"),
        ({"content": "   "}, "invalid_input", "content"),
        ({"evidence": "  "}, "invalid_input", "evidence"),
        ({"type": "opinion"}, "invalid_input", "type"),
        ({"target": Scope("project", "elsewhere")}, "scope_not_writable", "project:elsewhere"),
        ({"target": Scope("org", "acme"), "entities": []}, "scope_not_writable", "org:acme"),
    ],
)
def test_each_error_outcome_is_reachable_and_writes_nothing(
    world: World, fields: dict[str, object], code: str, needle: str
) -> None:
    world.say("user", CONCISE)
    request = {"content": "Prefers concise answers.", "attribute": "answer_style",
               "source_kind": "user_statement", "evidence": CONCISE} | fields
    before = world.counts()
    result = world.write(**request)
    assert result.outcome == code and result.error is not None and result.error.code == code
    assert needle in result.error.message
    assert world.counts() == before


def test_about_entity_required_outside_the_users_own_scope(world: World) -> None:
    world.share(Scope("project", "retold"), write=True)
    before = world.counts()
    result = world.write(content="Releases ship on Fridays.", attribute="release_day",
                         target=Scope("project", "retold"))
    assert result.outcome == "invalid_subject"
    assert result.note == "about entity required"
    assert world.counts() == before


def test_principal_rejects_slashes_so_private_scopes_stay_unique() -> None:
    with pytest.raises(ValueError, match="must not contain '/'"):
        Principal("a/b", "c", None, None)
    with pytest.raises(ValueError, match="must not contain '/'"):
        Principal("a", "b/c", None, None)
