"""``retold members add|remove|list`` through the CLI entry point, and what a membership
changes for a session of a granted agent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from retold import build_runtime, load_config
from retold.cli import main
from retold.config.env import store_target as store_keys
from retold.models import Principal, Scope
from retold.policy.grants import readable_scopes

AGENT = "support-agent"
APOLLO = Scope("project", "apollo")


@pytest.fixture
def flags(tmp_path: Path, store_target: str) -> list[str]:
    config = tmp_path / "config.yaml"
    # The store path places the embedded broker's file, on both backends.
    config.write_text(f"store:\n  path: {tmp_path / 'mem.sqlite'}\nembedding:\n  model: fake\n")
    return ["--store", store_target, "--config", str(config)]


def _reads_apollo(flags: list[str], user: str) -> bool:
    config = load_config(flags[3], overrides={"store": store_keys(flags[1])})
    with build_runtime(config) as rt:
        return APOLLO in readable_scopes(rt.store, Principal(AGENT, user, "s", None))


def test_members_add_list_remove(flags: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["grant", AGENT, "project:apollo", "--read", *flags]) == 0
    assert main(["members", "add", "project:apollo", "mia", "--as", "ops", *flags]) == 0
    assert main(["members", "add", "project:apollo", "mia", *flags]) == 0
    assert _reads_apollo(flags, "mia") and not _reads_apollo(flags, "nick")
    capsys.readouterr()

    assert main(["members", "list", "project:apollo", "--json", *flags]) == 0
    [line] = capsys.readouterr().out.splitlines()
    listed = json.loads(line)
    assert (listed["scope"], listed["user_id"], listed["added_by"]) == ("project:apollo", "mia", "ops")

    assert main(["members", "remove", "project:apollo", "mia", *flags]) == 0
    assert main(["members", "remove", "project:apollo", "mia", *flags]) == 0
    assert main(["members", "list", "project:apollo", *flags]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == ["removed mia from project:apollo",
                   "mia was not a member of project:apollo; nothing changed",
                   "project:apollo has no explicit members (users whose session names the project"
                   " still belong)"]
    assert not _reads_apollo(flags, "mia")


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (["members", "add", "user:mia", "mia"], 1, "user:mia is not a shared scope"),
        (["members", "add", "project:apollo", "a/b"], 1, "must not contain '/'"),
        (["members", "remove", "project:apollo"], 2, "members remove needs USER"),
        (["members", "drop", "project:apollo", "mia"], 2, "invalid choice"),
    ],
)
def test_refused_member_commands_say_one_line(
    flags: list[str], capsys: pytest.CaptureFixture[str], args: list[str], code: int, needle: str
) -> None:
    if code == 2:  # argparse's usage errors exit
        with pytest.raises(SystemExit) as exited:
            main([*args, *flags])
        assert exited.value.code == 2
    else:
        assert main([*args, *flags]) == code
    captured = capsys.readouterr()
    [line] = captured.err.strip().splitlines()
    assert needle in line and "Traceback" not in captured.err
    assert captured.out == ""
