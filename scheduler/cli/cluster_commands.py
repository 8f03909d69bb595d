"""What the cluster offers: `corral cluster` (nodes, GPUs, their health and tenants), `corral models` (the
catalog) and `corral policy` (the active placement policy, and switching it)."""

from __future__ import annotations

import click
from rich.markup import escape
from rich.table import Table

import corral.models as m
from scheduler.cli.client_io import api_errors, client, connection, console, print_json


def health_text(health: m.NodeHealth | None) -> str:
    """', GPUs ok' / ', GPUs degraded' / ', health stale (...)' for a node's title; '' without a report."""
    if health is None:
        return ""
    if health.stale:
        return f", [yellow]health stale[/] ({health.age_s or 0:.0f} s old)"
    if health.agent == "stopped":
        return ", [yellow]agent stopped[/]"
    return ", GPUs [green]ok[/]" if health.status == "ok" else ", GPUs [red]degraded[/]"


def gpu_health_text(reading: m.GpuHealth | None) -> str:
    """One GPU's reading: its status, with the temperature and whatever made it not ok."""
    if reading is None:
        return "-"
    parts = [reading.status or "?"]
    if reading.temperature_c is not None:
        parts.append(f"{reading.temperature_c} °C")
    if reading.ecc_uncorrected:
        parts.append(f"{reading.ecc_uncorrected} ECC")
    if reading.xid_errors:
        parts.append("XID " + ",".join(map(str, reading.xid_errors[-3:])))
    if reading.error:
        parts.append(reading.error[:60])
    return escape(" ".join(parts))


def _status_text(node: m.Node) -> str:
    status = "[green]alive[/]" if node.alive else "[red]down[/]"
    drain = node.drain
    if drain:  # an admin's drain: nothing new starts there (`corral node resume`)
        status += f", [yellow]drained[/]{': ' + escape(drain.reason) if drain.reason else ''}"
    return status


def _gpu_table(node: m.Node) -> Table:
    """One node's GPUs, a row each: type, memory, free share (or closed), health, tenants."""
    health = node.health
    by_gpu = {h.index: h for h in health.gpus or []} if health else {}
    # The rack the node names (`corral node start --rack`), before its preset: the map groups by it too.
    rack = f"rack {escape(node.rack)}, " if node.rack else ""
    # Its operator's labels (`corral node start --label`), which jobs' constraints select it by.
    labels = "".join(f"{escape(k)}={escape(str(v))}, " for k, v in sorted((node.labels or {}).items()))
    table = Table(title=f"{escape(node.name or '')} ({rack}{labels}{escape(node.preset or '')}, {_status_text(node)}"
                        f"{health_text(health)})", title_justify="left", box=None, header_style="bold")
    for col in ("gpu", "local", "type", "mem", "free", *(("health",) if health else ()), "tenants"):
        table.add_column(col, justify="left" if col in ("type", "health", "tenants") else "right")
    for g in node.gpus or []:
        tenants = ", ".join(_tenant_text(t) for t in g.tenants or [])
        gpu_health = (gpu_health_text(by_gpu.get(g.local_index)),) if health else ()
        # A closed GPU (down, drained or faulty node) takes no new job: its idle share is not free.
        free = "closed" if g.closed else f"{g.free_share or 0:g}"
        table.add_row(str(g.index), str(g.local_index), escape(g.gpu_type or ""), f"{g.mem_gb or 0:g} GB",
                      free, *gpu_health, escape(tenants) or "-")
    return table


NODE_JOBS_SHOWN = 4  # job ids a node's line names before "+N more"


def _node_table(nodes: list[m.Node]) -> Table:
    """A line a node, so that a cluster of a thousand GPUs fits a terminal: its GPUs in use, free share (closed GPUs
    counted apart), the jobs on it and its health."""
    table = Table(box=None, header_style="bold")
    for col in ("node", "rack", "preset", "status", "gpus", "in use", "free", "jobs", "health"):
        table.add_column(col, justify="right" if col in ("gpus", "in use", "free") else "left")
    for node in nodes:
        gpus = node.gpus or []
        used = sum(1 for g in gpus if g.tenants)
        closed = sum(1 for g in gpus if g.closed)
        free = sum(g.free_share or 0 for g in gpus if not g.closed)
        jobs = sorted({t.job_id or 0 for g in gpus for t in g.tenants or []})
        shown = " ".join(f"#{j}" for j in jobs[:NODE_JOBS_SHOWN]) + (
            f" +{len(jobs) - NODE_JOBS_SHOWN} more" if len(jobs) > NODE_JOBS_SHOWN else "")
        table.add_row(escape(node.name or ""), escape(node.rack or "-"), escape(node.preset or ""),
                      _status_text(node), str(len(gpus)), str(used),
                      f"{free:g}" + (f" ({closed} closed)" if closed else ""), shown or "-",
                      health_text(node.health).removeprefix(", ") or "-")
    return table


def _tenant_text(t: m.Tenant) -> str:
    """A GPU's tenant as `corral cluster` prints it: another user's job comes without its name and user."""
    who = f"{t.name} ({t.user})" if t.user is not None else "(another user's job)"
    return f"job {t.job_id} {who} ×{t.share or 0:g}"


@click.command()
@click.option("--json", "as_json", is_flag=True)
@click.option("--gpus", "per_gpu", is_flag=True, help="Every GPU of every node, with its tenants and health.")
@click.option("--node", "nodes", multiple=True, metavar="NAME",
              help="These nodes' GPUs (repeatable); the other nodes are left out.")
@connection
def cluster(as_json: bool, per_gpu: bool, nodes: tuple[str, ...], url: str, token: str | None) -> None:
    """Nodes with their GPUs in use, free share, jobs and health (a line each), and the totals; `--gpus` or `--node`
    for every GPU with its tenants."""
    with api_errors():
        c = client(url, token).cluster()
    if as_json:
        print_json(c)
        return
    out = console()
    if nodes:
        known = {n.name for n in c.nodes or []}
        missing = [n for n in nodes if n not in known]
        if missing:
            raise click.BadParameter(f"no node {', '.join(missing)} in the cluster ({len(known)} nodes: "
                                     "`corral cluster` lists them)", param_hint="--node")
    if per_gpu or nodes:
        for node in c.nodes or []:
            if not nodes or node.name in nodes:
                out.print(_gpu_table(node))
    else:
        out.print(_node_table(c.nodes or []))
    t, q = c.totals or m.Totals(), c.queue or m.Queue()
    closed = (t.gpus or 0) - (t.gpus_usable if t.gpus_usable is not None else t.gpus or 0)
    usable = f" ({t.gpus_free} free of {t.gpus_usable} usable, {closed} closed)" if closed else ""
    out.print(f"{t.nodes} nodes, {t.gpus} GPUs{usable}: {t.gpus_allocated} allocated ({t.gpus_shared} shared), "
              f"{t.share_allocated or 0:g} GPUs of share in use; queue: {q.pending} pending, {q.running} running; "
              f"policy: {c.active_policy or '(controller default)'}"
              + (f"; fabric: {escape(c.fabric)}" if c.fabric else ""))


@click.command()
@click.option("--json", "as_json", is_flag=True)
@connection
def models(as_json: bool, url: str, token: str | None) -> None:
    """The model catalog: what `submit --model` accepts, with each model's kind and isolated demands."""
    with api_errors():
        catalog = client(url, token).models()
    if as_json:
        print_json(catalog)
        return
    table = Table(box=None, header_style="bold")
    keys = [k for k in ("name", "kind", "compute_ms", "mem_gb", "grad_mb", "latency_ms", "slo_ms", "source")
            if any(getattr(model, k) is not None for model in catalog)]
    for k in keys:
        table.add_column(k, justify="left" if k in ("name", "kind") else "right")
    for model in catalog:
        table.add_row(*(_cell(getattr(model, k)) for k in keys))
    console().print(table)


def _cell(value: object) -> str:
    """A catalog figure as people write it (94, not 94.0: the typed answer's floats); "-" where a model has none."""
    if value is None:
        return "-"
    return escape(f"{value:g}" if isinstance(value, float) else str(value))


@click.command()
@click.argument("name", required=False)
@connection
def policy(name: str | None, url: str, token: str | None) -> None:
    """Show the active placement policy and the available ones; with NAME, switch to it (admins only)."""
    with api_errors():
        api = client(url, token)
        if name is not None:
            click.echo(f"active policy: {api.set_policy(name)}")
            return
        info = api.policies()
    out = console()
    out.print(f"active policy: {escape(info.active or '(the controller default)')}")
    out.print("available: " + ", ".join(escape(n) for n in info.available or []))

CLUSTER_COMMANDS = [cluster, models, policy]
