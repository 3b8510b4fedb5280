"""The work behind ``cohort verify``: batch the records, score them, print rows and totals."""

from __future__ import annotations

import json
import textwrap
from collections import Counter

from rich.console import Console
from rich.progress import Progress
from rich.table import Column, Table
from rich.text import Text

from cohort.rpc.tls import ClientTls
from cohort.verifiers.base import RolloutResult
from cohort.verifiers.client import HandshakeError, VerifierClient, VerifierRequestError, WeightedVerifier
from cohort.verifiers.convert import status_name
from cohort.verifiers.records import Record, RecordError


DETAIL_CHARS = 400
"""Longer details are shortened at a word boundary in the table (``--json`` carries them whole)."""


async def run_verify(records: list[Record], endpoints: dict[str, list[str]], weights: dict[str, float],
                     timeout: float, retries: int, batch_size: int, as_json: bool, max_rows: int,
                     tls: ClientTls | None = None) -> int:
    console = Console(stderr=as_json)  # progress and totals (stderr when stdout carries JSON)
    err = Console(stderr=True)
    out = Console()
    configured = [WeightedVerifier(n, weights.get(n, 1.0), tuple(eps), tls=tls) for n, eps in endpoints.items()]
    async with VerifierClient(configured, timeout_s=timeout, retries=retries) as client:
        try:
            await client.handshake()
        except HandshakeError as exc:
            err.print(f"[red]error:[/] {exc}")
            return 3
        rows = []
        with Progress(console=console, transient=True, disable=len(records) <= batch_size) as progress:
            task = progress.add_task("scoring", total=len(records))
            for start in range(0, len(records), batch_size):
                batch = records[start : start + batch_size]
                try:  # the one scoring call: route each row (records.route), fan out, combine
                    scored = await client.score(batch)
                except (RecordError, VerifierRequestError) as exc:
                    err.print(f"[red]error:[/] {exc}")
                    return 2
                rows += [(rec, rollout, s) for rec, group in zip(batch, scored)
                         for rollout, s in zip(rec.rollouts, group)]
                progress.advance(task, len(batch))
    names = list(endpoints)
    if as_json:
        for rec, rollout, s in rows:
            print(json.dumps({
                "group_id": rec.task.id, "index": rollout.index, "status": status_name[s.status], "reward": s.reward,
                "components": dict(s.components),
                "verifiers": {n: {"status": status_name[r.status], "verdict": r.verdict.value, "reward": r.reward,
                                  "detail": r.detail, "flags": list(r.flags),
                                  **({"steps": [[x.end, x.reward] for x in r.steps]} if r.steps else {}),
                                  } for n, r in s.results.items()},
            }))
    elif not out.is_terminal:  # a pipe or a file: plain lines, no box drawn at a guessed width
        print("\t".join(["group", "idx", *names, "reward", "detail"]))
        for rec, rollout, s in rows[:max_rows]:
            cells = [_cell(s.results.get(n))[0] for n in names]
            reward = f"{s.reward:.3g}" if s.usable else "unusable"
            group = " ".join(rec.task.id.split())  # whitespace collapsed: a tab or newline would break the line
            print("\t".join([group, str(rollout.index), *cells, reward, " ".join(s.detail.split())]))
    else:
        # rich wraps the detail at word boundaries (fold: a long token such as a LaTeX answer breaks
        # rather than ending in "…"); only a very long detail is shortened, at a word, with an ellipsis
        table = Table(Column("group", overflow="fold"), "idx", *names, "reward",
                      Column("detail", overflow="fold", min_width=24), title=f"{len(rows)} rollouts")
        for rec, rollout, s in rows[:max_rows]:
            cells = []
            for n in names:
                text, usable = _cell(s.results.get(n))
                cells.append(text if usable else f"[red]{text}[/]")
            detail = textwrap.shorten(s.detail, DETAIL_CHARS, placeholder=" …") if s.detail else ""
            table.add_row(Text(rec.task.id), str(rollout.index), *cells,
                          f"{s.reward:.3g}" if s.usable else "[red]unusable[/]", Text(detail))  # Text: no markup
        out.print(table)
    statuses = Counter(s.status.value for *_, s in rows)
    usable = [s.reward for *_, s in rows if s.usable]
    mean = sum(usable) / len(usable) if usable else float("nan")
    console.print(f"groups {len(records)}  rollouts {len(rows)}  usable {len(usable)}  mean reward {mean:.4f}  "
                  f"statuses {dict(statuses)}", soft_wrap=True)
    return 0


def _cell(r: RolloutResult | None) -> tuple[str, bool]:
    """One verifier's cell for one rollout: ``reward verdict``, its status when unusable, ``-`` when not asked."""
    if r is None:
        return "-", True
    return (f"{r.reward:g} {r.verdict.value}", True) if r.usable else (r.status.value, False)
