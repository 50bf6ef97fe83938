"""``retold audit`` on a real store, through ``main``: sample the week's extraction writes,
list them with their evidence, answer one, and see the answers in ``retold metrics``; a
wrong call is one line and an exit code, and changes nothing."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from retold.cli import main
from retold.clock import SystemClock
from retold.quiet import QUIET_ENVIRONMENT
from retold.testing import World, make_world
from tests.extracted import extract_facts


@pytest.fixture(autouse=True)
def _restore_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # main() sets the quiet variables in os.environ; keep them out of later tests.
    for name, value in QUIET_ENVIRONMENT.items():
        monkeypatch.setenv(name, os.environ.get(name, value))


@pytest.fixture
def written(tmp_path: Path, store_target: str) -> Iterator[tuple[list[str], list[str]]]:
    """Three records extraction wrote just now (the command reads the wall clock), and the
    flags that open their store."""
    world: World = make_world(tmp_path, store=store_target)
    world.clock.set(SystemClock().now())
    ids = extract_facts(world, "lockers", 3)
    world.rt.close()
    config = tmp_path / "config.yaml"
    config.write_text(f"store:\n  path: {tmp_path / 'mem.sqlite'}\nembedding:\n  model: fake\n")
    yield ids, ["--store", world.target, "--config", str(config)]


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_sample_list_answer_and_metrics(written: tuple[list[str], list[str]],
                                        capsys: pytest.CaptureFixture[str]) -> None:
    ids, flags = written
    code, out, _ = _run(capsys, "audit", "sample", *flags)
    assert code == 0 and out.startswith("sampled 3 of 3 records extraction wrote since ")
    assert "20 a week (review_sample_rate is 0)" in out
    assert _run(capsys, "audit", "sample", *flags)[1].startswith("sampled 0 of 3 ")

    code, out, err = _run(capsys, "audit", "list", *flags)
    assert code == 0 and "3 shown, 3 waiting for an answer" in err
    for record_id in ids:
        assert f"{record_id}  sampled " in out
    assert "says:     Aditya's gym locker 0 has code 1000." in out
    assert "evidence: My locker at the gym is number 0 and the code is 1000 for it." in out

    code, out, _ = _run(capsys, "audit", "answer", ids[0][-8:], "--true", "yes", "--atomic", "no",
                        "--keep", "yes", "--as", "alice", *flags)
    assert (code, out.strip()) == (0, f"answered {ids[0]}: true yes, atomic no, worth keeping yes (by alice)")

    entries = [json.loads(line) for line in _run(capsys, "audit", "list", "--json", *flags)[1].splitlines()]
    assert [e["id"] for e in entries] == ids[1:]
    assert entries[0]["evidence_turn"]["content"].startswith("My locker at the gym is number 1 ")
    answered = [json.loads(line) for line in _run(capsys, "audit", "list", "--all", "--json", *flags)[1]
                .splitlines() if json.loads(line)["id"] == ids[0]]
    assert answered[0]["answers"] == {"true": True, "atomic": False, "keep": True}
    assert answered[0]["answered_by"] == "alice"

    code, out, _ = _run(capsys, "metrics", "--no-queue", "--no-hygiene", *flags)
    assert code == 0
    (line,) = [line for line in out.splitlines() if line.startswith("audit:")]
    assert "1 answered (sampled in the last 28 days): true 100%, atomic 0%, worth keeping 100%" in line
    assert "2 waiting, oldest 0.0 days" in line
    metrics = json.loads(_run(capsys, "metrics", "--no-queue", "--no-hygiene", "--json", *flags)[1])
    assert metrics["audit"]["answered"] == 1 and metrics["audit"]["open"] == 2


@pytest.mark.parametrize(("args", "code", "message"), [
    (["answer", "--true", "yes"], 2, "retold audit: answer needs ID, --atomic, --keep"),
    (["answer", "no-such-id", "--true", "yes", "--atomic", "yes", "--keep", "yes"], 1,
     "retold audit: memory no-such-id was never sampled for the audit"),
    (["list", "some-id"], 2, "retold audit: list takes no ID"),
    (["answer", "x", "--true", "maybe"], 2, "argument --true: invalid choice: 'maybe'"),
])
def test_a_wrong_call_is_one_line_and_changes_nothing(
    written: tuple[list[str], list[str]], capsys: pytest.CaptureFixture[str], args: list[str], code: int,
    message: str,
) -> None:
    _, flags = written
    assert _run(capsys, "audit", "sample", *flags)[0] == 0
    if code == 2 and "invalid choice" in message:
        with pytest.raises(SystemExit) as exited:
            main(["audit", *args, *flags])
        got, (out, err) = exited.value.code, capsys.readouterr()
    else:
        got, out, err = _run(capsys, "audit", *args, *flags)
    assert got == code and message in err and len(err.strip().splitlines()) == 1 and out == ""
    listed = [json.loads(line) for line in _run(capsys, "audit", "list", "--json", *flags)[1].splitlines()]
    assert len(listed) == 3 and all(e["answers"] is None for e in listed)
