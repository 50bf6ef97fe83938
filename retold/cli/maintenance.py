"""``retold migrate``, ``expire``, ``retain``, ``capacity``, ``hygiene``, ``review-due``,
``erase``, ``forget``, ``restore``, ``pin``, ``unpin``, ``reembed``, ``snapshot`` and
``extract``: the commands that change the store on an operator's behalf."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from retold.cli.common import (
    EXIT_PENDING,
    EXIT_REFUSED,
    EXIT_UNRESOLVED,
    RECORD_ID_HELP,
    SESSION_ID_HELP,
    Refused,
    actor,
    add_command,
    cli_config,
    cli_runtime,
    positive,
    resolve_record_id,
    resolve_session_id,
    scope_arg,
)
from retold.cli_failure import EXIT_ERROR
from retold.clock import to_iso
from retold.host import HostError
from retold.ingest.revision import RevisionError
from retold.retrieve.explain import short_id

__all__ = ["register"]


def _cmd_migrate(args: argparse.Namespace) -> int:
    from retold.runtime import build_runtime

    with build_runtime(cli_config(args), allow_migration_issues=True, allow_embedding_mismatch=True) as rt:
        # Opening the store already applied pending migrations; report what it did.
        result = rt.operations.migrate(expire_unmapped=args.expire_unmapped,
                                       allow_unmapped=args.allow_unmapped, actor=actor(args))
        applied = ", ".join(map(str, result.applied)) or "none pending"
        print(f"{rt.store.path}: schema version {result.version} (applied: {applied})")
        family = rt.store.embedding_family()
        print(f"  embedding family: {family or 'none recorded'}")
        for note in result.notes:
            print(f"  {note}")
        for issue in result.issues:
            state = "expired" if issue.record_id in result.expired else "unresolved"
            print(f"  {issue.record_id}  migration {issue.migration_version}: {issue.issue} [{state}]")
        if result.unresolved and not args.allow_unmapped:
            print(f"{result.unresolved} legacy records need review; retire them with --expire-unmapped"
                  " or acknowledge them with --allow-unmapped", file=sys.stderr)
            return EXIT_UNRESOLVED
    return 0


def _cmd_expire(args: argparse.Namespace) -> int:
    with cli_runtime(args) as rt:
        count = rt.operations.expire(actor(args))
    print(f"expired {count} records")
    return 0


def _cmd_retain(args: argparse.Namespace) -> int:
    """Run every retention sweep and print one line per sweep."""
    with cli_runtime(args) as rt:
        result = rt.operations.retain(actor(args))
        config, raw_days = rt.config, rt.memory_pack.classes.raw.retention_days
    aged = ("none are due: the memory pack keeps transcripts" if raw_days is None
            else f"ended more than {raw_days} days ago")
    print(f"blanked the transcripts of {result.sessions_blanked} sessions (extracted, {aged})")
    print(f"deleted {result.search_logs_deleted} search_log rows and {result.turn_decisions_deleted}"
          f" turn decisions older than {config.retention.search_log_days} days")
    print(f"thinned the payloads of {result.event_payloads_thinned} events older than"
          f" {config.retention.event_payload_days} days to ids, outcomes and counts")
    print(f"erased {result.forgotten_erased} records forgotten more than"
          f" {config.lifecycle.restore_days} days ago")
    if not result.wal_truncated:
        print("warning: another connection kept the WAL from being truncated; removed text may stay"
              " in it until the next checkpoint", file=sys.stderr)
    return 0


def _cmd_capacity(args: argparse.Namespace) -> int:
    """Report (or, with --apply, archive) what keeps each scope over its cap."""
    with cli_runtime(args, models=False) as rt:
        results = rt.operations.capacity(actor(args), apply=args.apply)
        caps = rt.config.lifecycle.max_active_per_scope
    if all(getattr(caps, kind) is None for kind in ("user", "agent", "project", "org")):
        print("no scope kind has a cap (lifecycle.max_active_per_scope); nothing to do")
        return 0
    if not results:
        print("every scope is within its cap")
    verb = "archived" if args.apply else "would archive"
    for result in results:
        print(f"{result.scope}: {result.live} live, cap {result.cap}; {verb} {len(result.archived)}"
              + (f"; {result.still_over} stay over (pinned, or an attribute's only current value)"
                 if result.still_over else ""))
        for archival in result.archived[:args.show]:
            parts = archival.parts.as_dict()
            print(f"  {archival.row.record_id}  score {parts.pop('total'):.3f} ("
                  + ", ".join(f"{k} {v:.2f}" for k, v in parts.items()) + ")")
    if results and not args.apply:
        print("nothing changed; add --apply to archive them (memory_revise restore brings one back)")
    return 0


def _cmd_hygiene(args: argparse.Namespace) -> int:
    """Report a scope's duplicates, stale and unused records; merge duplicates with --apply."""
    with cli_runtime(args, models=False) as rt:
        texts = rt.store.live_texts(args.scope)  # before --apply archives some of them
        report = rt.operations.hygiene(args.scope, actor(args), apply=args.apply)
        life = rt.config.lifecycle
    print(f"{report.scope}: {report.live} live records")
    folded = sum(len(c.merge) for c in report.clusters)
    print(f"duplicates: {len(report.clusters)} clusters, {folded} records that repeat another"
          f" ({100 * report.duplicate_share:.1f}%)")
    verb = "merged" if args.apply else "merge"
    for cluster in report.clusters[:args.show]:
        print(f"  keep {cluster.keep}  {texts[cluster.keep][1]}")
        for record_id in cluster.merge:
            print(f"    {verb} {record_id}  {texts[record_id][1]}  [{cluster.reason}]")
    print(f"stale provisional (older than {life.stale_provisional_days} days, never confirmed or used):"
          f" {len(report.stale_provisional)}")
    print(f"unused (nothing used them in {life.unused_days} days): {len(report.unused)}")
    if args.apply:
        print(f"merged {report.merged} records into the record kept in their cluster (archived; restorable)")
    elif report.clusters:
        print("nothing changed; add --apply to merge each cluster into the record kept")
    return 0


def _cmd_erase(args: argparse.Namespace) -> int:
    kind, target = (("record", args.record) if args.record else
                    ("session", args.session) if args.session else ("user", args.user))
    if not args.yes:
        raise Refused(f"erasing {kind} {target} is irreversible; add --yes to confirm", EXIT_REFUSED)
    # Erasure embeds nothing, and a compliance request must not wait for a re-embed.
    with cli_runtime(args, models=False) as rt:
        ops = rt.operations
        erase: dict[str, Callable[[str, str, str], Any]] = {
            "record": ops.erase_record, "session": ops.erase_session, "user": ops.erase_user}
        resolve = {"record": resolve_record_id, "session": resolve_session_id}.get(kind)
        target = resolve(rt.store, target) if resolve else target
        result = erase[kind](target, args.reason, actor(args))
    counts = ", ".join(f"{k} {v}" for k, v in sorted(result.counts.items()))
    print(f"erased {kind} {target}: {counts}; event {result.event_id}")
    if not result.compacted:
        print("warning: another connection kept the WAL from being truncated; rerun when the host"
              " is stopped", file=sys.stderr)
    return 0


def _cmd_forget(args: argparse.Namespace) -> int:
    """Forget one record as the operator, through the reviser the memory_forget tool uses."""
    with cli_runtime(args, models=False) as rt:  # a forget drops a vector; it embeds nothing
        record = rt.store.get_record(resolve_record_id(rt.store, args.id))
        if record is None:
            raise Refused(f"no record {args.id}", EXIT_REFUSED)
        try:
            change = rt.reviser.change_status(actor(args), record, "forget", args.reason)
        except RevisionError as err:
            raise Refused(err.message, EXIT_REFUSED) from None
        until = rt.reviser.restorable_until(rt.store.get_record(record.id) or record)
    print(f"forgot {record.id} (it was {change.previous_status}); event {change.event_id}")
    if until is not None:
        short = short_id(record.id)
        typed = short if record.id.endswith(short) else record.id  # ids that are not UUIDs
        print(f"searches no longer return it; `retold restore {typed} --reason ...` brings it back until"
              f" {to_iso(until)[:10]}")
    return 0


def _cmd_restore(args: argparse.Namespace) -> int:
    with cli_runtime(args, models=False) as rt:
        record = rt.store.get_record(resolve_record_id(rt.store, args.id))
        if record is None:
            raise Refused(f"no record {args.id}", EXIT_REFUSED)
        try:
            change = rt.reviser.restore(actor(args), record, args.reason)
        except RevisionError as err:
            raise Refused(err.message, EXIT_REFUSED) from None
        conflicts = rt.store.conflicts_of(record.id)
    print(f"restored {record.id} as {change.status}; event {change.event_id}")
    if conflicts:
        print(f"it conflicts with {', '.join(conflicts)}, written while it was away;"
              " `retold get` shows both", file=sys.stderr)
    return 0


def _cmd_backfill(args: argparse.Namespace) -> int:
    with cli_runtime(args) as rt:  # it embeds, so the configured model must be the store's
        result = rt.operations.backfill(max_batches=args.max_batches)
    if result.error is not None:
        raise Refused(f"the encoder failed after {result.embedded} records ({result.error}); "
                      f"{result.pending} still wait for their vector", EXIT_ERROR)
    print(f"embedded {result.embedded} records; {result.pending} still wait for their vector")
    return 0


def _cmd_pin(args: argparse.Namespace) -> int:
    with cli_runtime(args, models=False) as rt:
        try:
            change = rt.host.pin if args.command == "pin" else rt.host.unpin
            target = resolve_record_id(rt.store, args.id)
            changed = change(target, args.reason, actor(args))
        except HostError as err:
            raise Refused(str(err), EXIT_REFUSED) from None
    state = "pinned" if args.command == "pin" else "unpinned"
    print(f"{state} {target}" if changed else f"{target} was already {state}; nothing changed")
    return 0


def _cmd_reembed(args: argparse.Namespace) -> int:
    """Re-embed here with a progress bar, or (``--enqueue``) check that the re-embed would
    be accepted and hand it to a worker on the maintenance queue."""
    def bar(done: int, total: int) -> None:
        width = 30
        filled = width if total == 0 else width * done // total
        sys.stderr.write(f"\rreembed [{'#' * filled}{'.' * (width - filled)}] {done}/{total}")
        sys.stderr.flush()

    with cli_runtime(args, repairs=True) as rt:
        if args.enqueue:
            from retold.broker.operator_tasks import enqueue_reembed

            # Refused here, in the operator's terminal, rather than in a worker's log.
            rt.operations.check_reembed(args.model, args.version, args.dims)
            task_id = enqueue_reembed(rt.config, args.model, args.version, args.dims)
            print(f"queued re-embedding with {args.model} version {args.version} as task {task_id} on"
                  f" the {rt.config.queue.maintenance_queue} queue; a worker reports its progress as"
                  " state PROGRESS (done/total) in Flower, and a re-run resumes where a stopped one left off")
            return 0
        result = rt.operations.reembed(args.model, args.version, dims=args.dims, progress=bar,
                                       actor=actor(args))
    sys.stderr.write("\n")
    resumed = f"; {result.resumed} were already done by a stopped run" if result.resumed else ""
    print(f"re-embedded {result.embedded} records with {result.model} version {result.version} "
          f"in {result.seconds:.1f} s ({result.records_per_second:.0f} records/s){resumed}; "
          f"dropped {result.dropped} old vectors")
    return 0


def _cmd_snapshot(args: argparse.Namespace) -> int:
    if args.action == "save":
        with cli_runtime(args) as rt:
            result = rt.operations.snapshot_save(args.path)
        print(f"saved {result.records} records ({result.bytes} bytes) to {result.path}")
        return 0
    if not args.yes:
        raise Refused("snapshot load replaces the store file under any open connection; stop the"
                      " host and add --yes to confirm", EXIT_REFUSED)
    with cli_runtime(args, existing=False, repairs=True) as rt:
        result = rt.operations.snapshot_load(args.path)
        target = rt.store.path
    print(f"loaded {result.records} records from {result.path} into {target}")
    return 0


def _cmd_review_due(args: argparse.Namespace) -> int:
    from retold.operations import TEMPORAL_REVIEWER

    with cli_runtime(args) as rt:
        count = rt.operations.review_due(actor(args, TEMPORAL_REVIEWER))
    print(f"flagged {count} records due for review")
    return 0


def _cmd_extract(args: argparse.Namespace) -> int:
    with cli_runtime(args) as rt:
        session = resolve_session_id(rt.store, args.session_id)
        if rt.store.get_session(session) is None:
            raise Refused(f"no session {session}")
        # A forced run logs its failure at info level only: the one line below reports it.
        result = rt.session_end.run(session, force=True)
    if result.outcome == "not_configured":
        raise Refused(f"{session} stays pending: {result.reason}", EXIT_PENDING)
    if result.outcome == "not_ended":
        raise Refused(f"session {session} has not ended; extraction runs after it ends")
    if result.outcome in ("failed", "busy", "missing"):
        raise Refused(f"extraction {result.outcome}: {result.reason or session}")
    print(f"{session}: {result.outcome} {json.dumps(result.counts, sort_keys=True)}")
    return 0


def register(commands: Any) -> None:
    """Add the maintenance commands, in the order ``retold --help`` lists them."""
    _add_migrate(commands)
    _add_sweeps(commands)
    _add_record_commands(commands)
    _add_store_rewrites(commands)
    _add_one_off_runs(commands)


def _add_migrate(commands: Any) -> None:
    """``migrate``: bring the schema forward."""
    migrate = add_command(commands, "migrate", _cmd_migrate, "apply pending schema migrations to the store",
                          "Apply forward-only schema migrations, print the embedding family the store's"
                          " vectors belong to, and list legacy records a migration could not map; exit 2"
                          " while any remain.")
    migrate.add_argument("--expire-unmapped", action="store_true",
                         help="retire every unmapped legacy record (status expired, one event each)")
    migrate.add_argument("--allow-unmapped", action="store_true",
                         help="acknowledge unmapped legacy records and exit 0")


def _add_sweeps(commands: Any) -> None:
    """``expire``, ``retain``, ``capacity``, ``backfill`` and ``hygiene``: sweeps across
    the store for what is past its age, over its cap, without its vector or repeated."""
    add_command(commands, "expire", _cmd_expire, "expire every active record past its expiry",
                "Mark every active record whose expires_at has passed, or that is older than its"
                " type's retention_days in the tenant's memory pack, as expired, one record.status"
                " event each.")
    add_command(commands, "retain", _cmd_retain, "remove user text past its retention age",
                "Blank the turns of sessions whose extraction completed and that ended more than"
                " sessions.retain_days ago, or the tenant pack's classes.raw.retention_days (turn rows"
                " stay; unextracted sessions are never blanked),"
                " delete search_log rows older than retention.search_log_days and cut the payloads of"
                " events older than retention.event_payload_days to ids, outcomes and counts.")

    capacity = add_command(commands, "capacity", _cmd_capacity, "archive what keeps a scope over its cap",
                           "For each scope over lifecycle.max_active_per_scope, list the lowest-scoring"
                           " live records (source trust, explicitness, recent use, freshness) that bring"
                           " it back to its cap; pinned records and an attribute's only current value are"
                           " never chosen. --apply archives them (searchable as history, restorable),"
                           " one record.archived event each.")
    capacity.add_argument("--apply", action="store_true", help="archive them (default: report only)")
    capacity.add_argument("--show", type=positive, default=10, help="records listed per scope (default 10)")

    backfill = add_command(commands, "backfill", _cmd_backfill, "embed records stored without their vector",
                           "Embed the records a write stored without their vector (the encoder failed or"
                           " ran past embedding.write_timeout_ms), embedding.reembed_batch_size at a time,"
                           " as beat's retold.backfill does every 5 minutes. Until then they are found by"
                           " their words only. Exits 1, with the records still waiting, when the encoder"
                           " fails again.")
    backfill.add_argument("--max-batches", type=positive, default=1000,
                          help="stop after this many batches (default 1000)")

    hygiene = add_command(commands, "hygiene", _cmd_hygiene,
                          "find a scope's duplicates, stale and unused records",
                          "Report the scope's near-duplicate clusters (same subject, the same words or a"
                          " cosine at lifecycle.duplicate_cosine), provisional records never confirmed or"
                          " used, and records unused for lifecycle.unused_days. --apply merges each cluster"
                          " into its strongest record (reinforced; the others archived, restorable).")
    hygiene.add_argument("--scope", required=True, type=scope_arg, help="scope as kind:id, e.g. user:aditya")
    hygiene.add_argument("--apply", action="store_true", help="merge the duplicates (default: report only)")
    hygiene.add_argument("--show", type=positive, default=10, help="clusters listed (default 10)")


def _add_record_commands(commands: Any) -> None:
    """``erase``, ``forget``, ``restore``, ``pin`` and ``unpin``: changes to one record,
    session or user that an operator asks for."""
    erase = add_command(commands, "erase", _cmd_erase, "irreversibly erase a record, session or user",
                        "Irreversibly erase durable content, keep ids, kinds and timestamps,"
                        " then compact the file so no residue remains. Needs --yes.")
    target = erase.add_mutually_exclusive_group(required=True)
    target.add_argument("--record", metavar="ID", help="erase one record (tombstone kept); " + RECORD_ID_HELP)
    target.add_argument("--session", metavar="ID",
                        help="blank one session's transcript (turn rows kept); " + SESSION_ID_HELP)
    target.add_argument("--user", help="erase every place a user's text can reach")
    erase.add_argument("--reason", required=True, help="why; recorded on the audit event")
    erase.add_argument("--yes", action="store_true", help="confirm the irreversible erase")

    forget = add_command(commands, "forget", _cmd_forget, "forget a record (restorable for a while)",
                         "Forget one record as the operator, as the memory_forget tool does: no search"
                         " or tool returns it any more, its text stays so that `retold restore` can"
                         " bring it back within lifecycle.restore_days; one record.forgotten event. Use"
                         " `retold erase --record` to remove its text for good.")
    forget.add_argument("id", help=RECORD_ID_HELP)
    forget.add_argument("--reason", required=True, help="why; recorded on the audit event")

    restore = add_command(commands, "restore", _cmd_restore, "bring back a forgotten or archived record",
                          "Undo a forget within lifecycle.restore_days, or a capacity archive at any time:"
                          " the record returns to the status it had, searchable again; one record.restored"
                          " event. An erased record, or one past the window, cannot be restored.")
    restore.add_argument("id", help=RECORD_ID_HELP)
    restore.add_argument("--reason", required=True, help="why; recorded on the audit event")

    for name, does in (("pin", "keep a live record from ageing out (the expiry sweep skips it)"),
                       ("unpin", "remove a record's pin")):
        pin = add_command(commands, name, _cmd_pin, does, does[0].upper() + does[1:] + "; one event.")
        pin.add_argument("id", help=RECORD_ID_HELP)
        pin.add_argument("--reason", required=True, help="why; recorded on the audit event")


def _add_store_rewrites(commands: Any) -> None:
    """``reembed`` and ``snapshot``: commands that rewrite or replace the whole store."""
    reembed = add_command(commands, "reembed", _cmd_reembed, "re-embed every record with another model",
                          "Re-embed every record with text beside the live vectors (searches keep them;"
                          " a stopped run resumes), then swap: drop the old vectors, log one"
                          " store.reembedded event, and record the new embedding family as the store's."
                          " A new version of the same model is accepted; another model is refused while"
                          " the gate is still the one fitted for the old one.")
    reembed.add_argument("--model", required=True, help="embedding model name or path ('fake' for tests)")
    reembed.add_argument("--version", required=True, help="embedding version tag for the new vectors")
    reembed.add_argument("--dims", type=positive, help="vector width (default: embedding.dims)")
    reembed.add_argument("--enqueue", action="store_true", help="queue it for a worker (maintenance"
                         " queue; progress shows in Flower) instead of running it here")

    snapshot = add_command(commands, "snapshot", _cmd_snapshot, "save or load a copy of the store",
                           "Copy the SQLite database to a new file, or replace the store with a copy"
                           " (load needs --yes and a stopped host).")
    snapshot.add_argument("action", choices=["save", "load"], help="save the store, or load a snapshot")
    snapshot.add_argument("path", help="snapshot file")
    snapshot.add_argument("--yes", action="store_true", help="confirm replacing the store (load)")


def _add_one_off_runs(commands: Any) -> None:
    """``review-due`` and ``extract``: one batch of a worker's job, run in this process."""
    add_command(commands, "review-due", _cmd_review_due, "flag one batch of records due for review",
                "Atomically flag at most ingestion.temporal_review_batch_size records whose review_at"
                " has arrived, one record.review_due event each.")
    extract = add_command(commands, "extract", _cmd_extract, "run extraction for one session in-process",
                          "Run extraction, review and apply for one ended session in this process, again"
                          " if it already ran (a re-run reuses the stored stage outputs). Exits 3 when no"
                          " hosted model is configured: the session then stays pending.")
    extract.add_argument("session_id", help=SESSION_ID_HELP)
