"""`corral whatif`: the present queue simulated under another policy, more nodes or extra jobs, next to the
active policy."""

from __future__ import annotations

from typing import Any

import click
from rich.table import Table

import corral.models as m
from scheduler.cli.client_io import api_errors, client, connection, console, print_json
from scheduler.cli.client_text import gpus_text
from scheduler.cli.params import POSITIVE, Number
from scheduler.live.words import duration_text as duration_words


def _hypothetical(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> list[dict[str, Any]]:
    """--job MODEL:GPUS:SECONDS[:IN_SECONDS], repeatable: hypothetical jobs (the server checks each field)."""
    out = []
    for value in values:
        parts = value.split(":")
        try:
            if len(parts) not in (3, 4):
                raise ValueError
            job = {"model": parts[0], "num_gpus": float(parts[1]), "duration_s": float(parts[2])}
            if len(parts) == 4:
                job["submit_in_s"] = float(parts[3])
        except ValueError:
            raise click.BadParameter(f"{value!r}: write MODEL:GPUS:SECONDS[:IN_SECONDS], e.g. ResNet-50-bs64:2:3600",
                                     ctx, param) from None
        out.append(job)
    return out


WHATIF_ROWS = (("avg_jct_s", "average JCT"), ("p95_jct_s", "p95 JCT"), ("avg_queue_s", "average queueing"),
               ("makespan_s", "makespan"), ("gpu_util", "GPU use"))


@click.command()
@click.option("--policy", help="The policy to simulate [default: the active one].")
@click.option("--extra-nodes", type=Number("int", 0, 64), default=0, help="Nodes like the last live one, added now.")
@click.option("--job", "jobs", multiple=True, callback=_hypothetical, metavar="MODEL:GPUS:SECONDS[:IN]",
              help="A hypothetical job arriving now (or IN seconds from now); repeatable.")
@click.option("--seeds", type=Number("int", 1, 20), default=None, help="Simulations [default: the server's, 5].")
@click.option("--horizon", "horizon_s", type=POSITIVE, default=None, help="Simulate only this many seconds ahead.")
@click.option("--json", "as_json", is_flag=True, help="Print the whole answer as JSON.")
@connection
def whatif(policy: str | None, extra_nodes: int, jobs: list[dict[str, Any]], seeds: int | None,
           horizon_s: float | None, as_json: bool, url: str, token: str | None) -> None:
    """Simulate the present queue under another policy, more nodes or extra jobs, next to the active policy."""
    with api_errors():
        res = client(url, token).whatif(policy=policy, extra_nodes=extra_nodes, jobs=jobs, seeds=seeds,
                                        horizon_s=horizon_s)
    if as_json:
        print_json(res)
        return
    base = res.baseline
    table = Table(title=f"what if: {res.policy}" + (f", {extra_nodes} more node(s)" if extra_nodes else "")
                  + (f", {len(jobs)} more job(s)" if jobs else "") + f" ({len(res.seeds or [])} seeds)")
    table.add_column("")
    table.add_column(res.policy or "", justify="right")
    if base is not None:
        table.add_column(f"now: {base.policy}", justify="right")
        table.add_column("difference", justify="right")

    def cell(key: str, metrics: m.WhatIfMetrics | None) -> str:
        d: m.Distribution | None = getattr(metrics, key) if metrics is not None else None
        if d is None or d.mean is None or d.min is None or d.max is None:
            return ""
        if key == "gpu_util":
            return f"{d.mean:.0%} ({d.min:.0%}-{d.max:.0%})"
        return f"{duration_words(d.mean)} ({duration_words(d.min)}-{duration_words(d.max)})"

    for key, label in WHATIF_ROWS:
        row = [label, cell(key, res.metrics)]
        if base is not None:
            delta = (res.delta or {}).get(key)
            sign = "" if delta is None else ("+" if delta["mean"] >= 0 else "-")
            diff = "" if delta is None else (f"{sign}{abs(delta['mean']):.0%}" if key == "gpu_util"
                                             else f"{sign}{duration_words(abs(delta['mean']))}")
            row += [cell(key, base.metrics), diff]
        table.add_row(*row)
    console().print(table)
    for job in res.hypothetical or []:
        jct = duration_words(job.jct_s) if job.jct_s is not None else "does not finish"
        n = job.num_gpus or 0
        size = f"{n:g} of a GPU" if n < 1 else f"{gpus_text(n)} GPU{'s' if n > 1 else ''}"
        click.echo(f"{job.name}: {size} of {job.model}, done {jct} after it arrives "
                   f"(waits {duration_words(job.queue_s or 0.0)})")
    for note in res.notes or []:
        click.echo(f"note: {note}", err=True)

WHATIF_COMMANDS = [whatif]
