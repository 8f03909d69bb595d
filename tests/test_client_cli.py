"""The `corral` client commands against the real app served over HTTP from a background thread (SQLite under
CORRAL_HOME, the same database `corral token create` opens): every command's output, and one clear line on stderr
with exit status 1 for each failure."""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from conftest import new_store, served
from sqlalchemy import select

import corral.models as m
from corral import Client, CorralError
from scheduler.cli.commands import main
from scheduler.live.job_files import log_path
from scheduler.live.store import JobState, Store, database_url
from scheduler.live.store.models import Allocation, ApiToken, Gpu, Job, Node, Team, User
from scheduler.live.store.queries import create_token
from web import create_app


@dataclass
class Server:
    url: str
    store: Store
    token: str  # alice's


@pytest.fixture
def server(corral_home: Path, migrated_sqlite: Path) -> Iterator[Server]:
    store = new_store(database_url(), migrated_sqlite)  # CORRAL_HOME's SQLite: what `corral token create` opens too
    with store.session() as s:
        token = create_token(s, "alice")
    # alice submits command jobs: this server trusts its users with its own account (`--command-jobs everyone`)
    app = create_app(store, config={"CORRAL_COMMAND_JOBS": "everyone"})
    with served(app) as url:
        yield Server(url, store, token)
    store.close()


def corral(server: Server | None, *args: str, token: str | None = None, url: str | None = None) -> Result:
    env = {"CORRAL_URL": url or (server.url if server else ""), "CORRAL_TOKEN": token or (server.token if server
                                                                                               else "")}
    result = CliRunner().invoke(main, list(args), env=env)
    assert "Traceback" not in result.output
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def ok(server: Server, *args: str, **kw: str) -> str:
    result = corral(server, *args, **kw)
    assert result.exit_code == 0, result.output
    return result.stdout


def failure(result: Result, code: int = 1) -> str:
    """The error line: exit status `code`, nothing on stdout, one line on stderr."""
    assert result.exit_code == code, result.output
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("corral: "), result.stderr  # usage errors too: no usage block
    return result.stderr


def submit(server: Server, *extra: str) -> int:
    out = ok(server, "submit", "--name", "resnet", "--model", "ResNet-50-bs64", "--gpus", "2", "--duration", "60",
             *extra)
    assert out.startswith("submitted job ") and out.rstrip().endswith("(pending)")
    return int(out.split()[2])


def test_token_create_prints_only_a_token_that_authenticates(server: Server) -> None:
    result = CliRunner().invoke(main, ["token", "create", "--user", "carol", "--admin"])
    assert result.exit_code == 0, result.output
    token = result.stdout.strip()
    assert result.stdout == token + "\n" and " " not in token and token.startswith("corral_")
    jobs = Client(server.url, token).jobs()  # carol is an admin: she sees alice's job too
    assert jobs.total == 0
    submit(server)
    assert Client(server.url, token).jobs().total == 1
    out = ok(server, "jobs", token=token)
    assert "alice" in out


def test_submit_flags_file_and_client_token(server: Server, tmp_path: Path) -> None:
    jid = submit(server)
    ok(server, "user", "limits", "alice", "--max-priority", "3", token=admin_token(server))  # the built-in is 0
    out = ok(server, "submit", "--kind", "command", "--name", "train", "--model", "Transformer-XL", "--gpus", "0.5",
             "--entrypoint", "python train.py", "--workdir", "/data", "--env", "A=1", "--env", "B=x=y",
             "--priority", "3", "--restart-policy", "fail", "--max-restarts", "1", "--json")
    cmd = json.loads(out)
    assert (cmd["kind"], cmd["num_gpus"], cmd["env"], cmd["priority"], cmd["restart_policy"]) == (
        "command", 0.5, {"A": "1", "B": "x=y"}, 3, "fail")
    # No --duration: `corral show` says what the duration was estimated from (issue 50: durations from history).
    assert cmd["duration_estimate"]["text"]
    assert f"(estimated: {cmd['duration_estimate']['text']})" in ok(server, "show", str(cmd["id"]))

    spec = tmp_path / "job.json"
    spec.write_text(json.dumps({"name": "from-file", "kind": "emulated", "model": "MoE", "num_gpus": 4,
                                "duration_s": 30, "env": {"K": "v"}}))
    from_file = json.loads(ok(server, "submit", "--file", str(spec), "--gpus", "1", "--env", "L=w", "--json"))
    assert (from_file["name"], from_file["num_gpus"], from_file["env"]) == ("from-file", 1, {"K": "v", "L": "w"})

    first = submit(server, "--client-token", "retry-me")
    again = ok(server, "submit", "--name", "resnet", "--model", "ResNet-50-bs64", "--gpus", "2", "--duration", "60",
               "--client-token", "retry-me")
    assert again.startswith(f"job {first} was already submitted")
    with server.store.session() as s:
        assert sorted(s.scalars(select(Job.id)).all()) == sorted({jid, cmd["id"], from_file["id"], first})


def test_jobs_table_filters_and_json(server: Server) -> None:
    a, b = submit(server), submit(server)
    ok(server, "cancel", str(a))
    with server.store.session() as s:
        s.add(Allocation(job_id=b, attempt=1, rank=0, node="node-3", gpu=13, local_gpu=1, share=0.5,
                         allocated_at=time.time()))
        job = s.get(Job, b)
        assert job is not None
        job.state, job.attempt, job.progress = JobState.RUNNING, 1, 0.42
    out = ok(server, "jobs")
    lines = out.splitlines()
    assert lines[0].split()[:7] == ["id", "name", "user", "team", "state", "gpus", "model"]
    row_b = next(ln for ln in lines if ln.split()[0] == str(b))
    assert "running" in row_b and "42%" in row_b and "node-3: GPU 1 ×0.5" in row_b and row_b.split()[2:4] == [
        "alice", "default"]
    assert any(ln.split()[0] == str(a) and "cancelled" in ln for ln in lines[1:-1])
    assert "1-2 of 2 jobs" in lines[-1]

    only = json.loads(ok(server, "jobs", "--state", "cancelled", "--json"))
    assert only["total"] == 1 and only["jobs"][0]["id"] == a
    assert json.loads(ok(server, "jobs", "--limit", "1", "--offset", "1", "--json"))["jobs"][0]["id"] == a
    err = failure(corral(server, "jobs", "--user", "bob"))
    assert "HTTP 403" in err and "admin" in err


def test_show_and_cancel(server: Server) -> None:
    jid = submit(server, "--env", "SEED=7")
    out = ok(server, "show", str(jid))
    assert f"job {jid} resnet" in out and "pending" in out and "SEED=7" in out
    assert "submitted" in out and "submitted by alice" in out
    assert json.loads(ok(server, "show", str(jid), "--json"))["events"][0]["kind"] == "submitted"

    assert ok(server, "cancel", str(jid)).strip() == f"job {jid}: cancelled"
    out = ok(server, "show", str(jid))
    assert "cancelled while pending" in out
    err = failure(corral(server, "show", "4242"))
    assert "HTTP 404" in err and "4242" in err


def test_logs_prints_worker_output(server: Server) -> None:
    jid = submit(server)
    with server.store.session() as s:
        job = s.get(Job, jid)
        assert job is not None
        job.state, job.attempt = JobState.RUNNING, 1
        for rank in (0, 1):
            s.add(Allocation(job_id=jid, attempt=1, rank=rank, node=f"node-{rank}", gpu=rank, local_gpu=0, share=1.0,
                             allocated_at=time.time()))
    for rank in (0, 1):
        path = log_path(server.store.id, jid, 1, rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"r{rank} step {i}\n" for i in range(10)))
    out = ok(server, "logs", str(jid), "--rank", "1", "--tail", "2")
    assert out == "r1 step 8\nr1 step 9\n"
    out = ok(server, "logs", str(jid), "--tail", "1")
    assert out.splitlines() == [f"==> rank 0 (job-{jid}/attempt-1/rank-0.log) <==", "r0 step 9",
                                f"==> rank 1 (job-{jid}/attempt-1/rank-1.log) <==", "r1 step 9"]
    result = corral(server, "logs", str(jid), "--attempt", "5")
    assert result.exit_code == 0 and result.stdout == "" and "no logs" in result.stderr
    result = corral(server, "logs", str(jid), "--rank", "7")
    assert result.exit_code == 1 and result.stdout == "" and f"job {jid} has 2 workers (ranks 0-1)" in result.stderr


def test_cluster_table(server: Server) -> None:
    now = time.time()
    jid = submit(server)
    with server.store.session() as s:
        node = Node(name="node-a", index=0, preset="dgx-v100", alive=True, updated_at=now)
        node.gpus = [Gpu(index=i, local_index=i, gpu_type="V100-32GB", mem_gb=32.0) for i in range(2)]
        s.add(node)
        s.add(Allocation(job_id=jid, attempt=1, rank=0, node="node-a", gpu=1, local_gpu=1, share=0.5,
                         allocated_at=now))
        job = s.get(Job, jid)
        assert job is not None
        job.state, job.attempt = JobState.RUNNING, 1
    out = ok(server, "cluster", "--gpus")
    assert "node-a (dgx-v100, alive)" in out
    gpu1 = next(ln for ln in out.splitlines() if ln.split()[:2] == ["1", "1"])
    assert f"job {jid} resnet (alice) ×0.5" in gpu1 and "0.5" in gpu1.split()
    assert "1 nodes, 2 GPUs: 1 allocated (0 shared)" in out and "0 pending, 1 running" in out
    assert json.loads(ok(server, "cluster", "--json"))["totals"]["share_allocated"] == 0.5


def test_cluster_table_shows_gpu_health(server: Server) -> None:
    """What the node agents reported: the node's state in its title, each GPU's reading in a column; nothing for a
    node whose agent never reported."""
    now = time.time()
    readings = [{"index": 0, "status": "ok", "temperature_c": 44, "ecc_uncorrected": 0, "xid_errors": [], "error": ""},
                {"index": 1, "status": "degraded", "temperature_c": 80, "ecc_uncorrected": 3, "xid_errors": [48, 79],
                 "error": ""}]
    with server.store.session() as s:
        for i, (name, health_at) in enumerate((("hot", now), ("quiet", now - 100), ("plain", None))):
            node = Node(name=name, index=i, preset="dgx-a100", alive=True, updated_at=now, health_at=health_at,
                        health=None if health_at is None else {
                            "agent": "running", "updated_at": now, "interval_s": 10.0, "mps": None,
                            "status": "degraded" if name == "hot" else "ok",
                            "gpus": readings if name == "hot" else [readings[0], {**readings[0], "index": 1}]})
            node.gpus = [Gpu(index=2 * i + k, local_index=k, gpu_type="A100-80GB", mem_gb=80.0) for k in range(2)]
            s.add(node)
    out = ok(server, "cluster", "--gpus")
    assert "hot (dgx-a100, alive, GPUs degraded)" in out
    hot_gpu1 = next(ln for ln in out.splitlines() if ln.split()[:2] == ["1", "1"])
    assert "degraded 80 °C 3 ECC XID 48,79" in hot_gpu1
    assert "quiet (dgx-a100, alive, health stale (100 s old))" in " ".join(out.split())
    assert "plain (dgx-a100, alive)" in out
    plain = out.split("plain (dgx-a100, alive)")[1].splitlines()[1]
    assert plain.split() == ["gpu", "local", "type", "mem", "free", "tenants"]  # no health column without a report


def test_cluster_table_shows_drained_nodes_and_closed_gpus(server: Server) -> None:
    """A drained node says so (with its reason) in its title; its GPUs, and a GPU its agent reports faulty, read
    "closed", not free; the totals count the usable GPUs."""
    now = time.time()
    with server.store.session() as s:
        for i, name in enumerate(("kept", "fixing")):
            fixing = name == "fixing"
            node = Node(name=name, index=i, preset="dgx-a100", alive=True, updated_at=now,
                        drained_at=now if fixing else None, drain_reason="new NIC" if fixing else None,
                        health_at=now if name == "kept" else None,
                        health={"agent": "running", "updated_at": now, "interval_s": 10.0, "mps": None,
                                "status": "degraded", "gpus": [{"index": 1, "status": "degraded", "xid_errors": [79]}]}
                        if name == "kept" else None)
            node.gpus = [Gpu(index=2 * i + k, local_index=k, gpu_type="A100-80GB", mem_gb=80.0) for k in range(2)]
            s.add(node)
    out = ok(server, "cluster", "--gpus")
    assert "fixing (dgx-a100, alive, drained: new NIC)" in out
    rows = {tuple(ln.split()[:2]): ln.split() for ln in out.splitlines() if ln.split()[:1] in (["0"], ["1"], ["2"],
                                                                                              ["3"])}
    assert rows[("2", "0")][5] == rows[("3", "1")][5] == "closed"  # the drained node's (after "80 GB")
    assert rows[("1", "1")][5] == "closed" and rows[("0", "0")][5] == "1"  # kept's faulty GPU; its healthy one
    assert "2 nodes, 4 GPUs (1 free of 1 usable, 3 closed)" in out
    # A line a node by default: the closed GPUs counted apart from the free share, the drain and the health said.
    lines = {ln.split()[0]: ln for ln in ok(server, "cluster").splitlines() if ln.split()[:1] in (["kept"], ["fixing"])}
    assert lines["kept"].split()[3:7] == ["alive", "2", "0", "1"] and "(1 closed)" in lines["kept"]
    assert "GPUs degraded" in lines["kept"]
    assert "drained: new NIC" in lines["fixing"] and "0 (2 closed)" in lines["fixing"]


def test_cluster_prints_a_line_a_node_and_one_node_s_gpus_on_request(server: Server) -> None:
    """At a thousand GPUs a table of GPUs is unreadable: the default is a line a node (GPUs, in use, free share, the
    jobs on it, at most four named); `--node NAME` prints that node's GPUs alone; an unknown node is a usage error."""
    now = time.time()
    jids = [submit(server) for _ in range(6)]
    with server.store.session() as s:
        for i in range(3):
            node = Node(name=f"n{i}", index=i, preset="dgx-a100", alive=True, updated_at=now, rack="r1")
            node.gpus = [Gpu(index=8 * i + k, local_index=k, gpu_type="A100-80GB", mem_gb=80.0) for k in range(8)]
            s.add(node)
        for k, jid in enumerate(jids):  # six jobs on n0: 1 GPU each, the last two sharing GPU 5
            s.add(Allocation(job_id=jid, attempt=1, rank=0, node="n0", gpu=min(k, 5), local_gpu=min(k, 5),
                             share=0.5 if k >= 5 else 1.0, allocated_at=now))
            job = s.get(Job, jid)
            assert job is not None
            job.state, job.attempt = JobState.RUNNING, 1
    out = ok(server, "cluster")
    rows = [ln.split() for ln in out.splitlines() if ln.split()[:1] in (["n0"], ["n1"], ["n2"])]
    assert [r[0] for r in rows] == ["n0", "n1", "n2"] and len(out.splitlines()) < 10
    n0 = rows[0]
    assert n0[1:7] == ["r1", "dgx-a100", "alive", "8", "6", "2.5"]  # 6 GPUs in use; 2 free and half of GPU 5
    assert " ".join(n0[7:]) == " ".join(f"#{j}" for j in jids[:4]) + " +2 more -"  # no health report: -
    assert rows[1][5:8] == ["0", "8", "-"]
    one = ok(server, "cluster", "--node", "n0")
    assert "n0 (rack r1, dgx-a100, alive)" in one and "n1 (" not in one
    assert sum(1 for ln in one.splitlines() if "".join(ln.split()[:2]).isdigit()) == 8  # its GPU rows: gpu, local
    err = corral(server, "cluster", "--node", "nope")
    assert err.exit_code == 2 and "no node nope in the cluster" in err.output


@pytest.mark.parametrize(("args", "field"), [
    (("--gpus", "1.5"), "num_gpus"),
    (("--gpus", "0.005"), "num_gpus"),
    (("--model", "NoSuchNet"), "model"),
    (("--duration", "1e12"), "duration_s"),
    (("--entrypoint", "sleep 1"), "entrypoint"),
])
def test_bad_field_exits_1_naming_it(server: Server, args: tuple[str, ...], field: str) -> None:
    base = {"--name": "x", "--model": "ResNet-50-bs64", "--gpus": "1", "--duration": "10"}
    base[args[0]] = args[1]
    err = failure(corral(server, "submit", *[x for kv in base.items() for x in kv]))
    assert "HTTP 422" in err and f"{field}:" in err
    with server.store.session() as s:
        assert s.scalars(select(Job)).first() is None


def test_usage_errors_exit_2(server: Server) -> None:
    err = failure(corral(server, "submit", "--name", "x", "--model", "MoE", "--gpus", "many"), code=2)
    assert err == "corral: --gpus: must be a number, got 'many'\n"
    # What the server would refuse too, refused before a request (NaN and infinity cannot even be sent as JSON).
    for args in (("--gpus", "nan"), ("--gpus", "-2"), ("--duration", "inf"), ("--duration", "-1")):
        err = failure(corral(server, "submit", "--name", "x", "--model", "MoE", *args), code=2)
        assert err.startswith(f"corral: {args[0]}: must be ")
    assert "--env" in failure(corral(server, "submit", "--env", "NOEQUALS"), code=2)


def test_unreachable_server_and_missing_or_bad_token(server: Server) -> None:
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    err = failure(corral(server, "jobs", url=url))
    assert url in err and "CORRAL_URL" in err
    err = failure(CliRunner().invoke(main, ["jobs"], env={"CORRAL_URL": server.url, "CORRAL_TOKEN": ""}))
    assert "CORRAL_TOKEN" in err and "corral token create" in err
    err = failure(corral(server, "cluster", token="corral_wrong"))
    assert "HTTP 401" in err and "invalid" in err


def test_client_error_carries_status_and_field_errors(server: Server) -> None:
    client = Client(server.url, server.token)
    with pytest.raises(CorralError) as info:
        client.submit({"name": "", "kind": "emulated", "model": "MoE", "num_gpus": 1.5, "duration_s": 1})
    assert info.value.status == 422 and set(info.value.errors) == {"name", "num_gpus"}
    job, created = client.submit_once({"name": "a", "kind": "emulated", "model": "MoE", "num_gpus": 1,
                                       "duration_s": 1, "client_token": "k"})
    again, created_again = client.submit_once({"name": "a", "kind": "emulated", "model": "MoE", "num_gpus": 1,
                                               "duration_s": 1, "client_token": "k"})
    assert (created, created_again, again.id) == (True, False, job.id)


@pytest.mark.parametrize("argv", [
    ["--user", "--admin"],  # `--user $USER --admin` with USER unset: click would take "--admin" as the name
    ["--user", ""],
    ["--user", "-rf"],
    ["--user", "a b"],
    ["--user", "<script>"],
])
def test_token_create_refuses_bad_user_names(server: Server, argv: list[str]) -> None:
    err = failure(CliRunner().invoke(main, ["token", "create", *argv]), code=2)
    assert "--user" in err
    with server.store.session() as s:
        assert [u.name for u in s.scalars(select(User))] == ["alice"]  # the fixture's user, nobody new


def test_token_list_revoke_and_expiry(server: Server) -> None:
    runner = CliRunner()
    carol = runner.invoke(main, ["token", "create", "--user", "carol.k_1", "--expires", "1h"]).stdout.strip()
    assert Client(server.url, carol).jobs().total == 0  # authenticates, and is now in the server's cache
    listing = runner.invoke(main, ["token", "list"])
    assert listing.exit_code == 0 and "carol.k_1" in listing.stdout and "active" in listing.stdout
    assert carol not in listing.stdout and server.token not in listing.stdout  # prefixes only
    rows = json.loads(runner.invoke(main, ["token", "list", "--json"]).stdout)
    mine = next(r for r in rows if r["user"] == "carol.k_1")
    assert mine["expires_at"] == pytest.approx(time.time() + 3600, abs=60) and carol.startswith(mine["prefix"])

    revoked = runner.invoke(main, ["token", "revoke", mine["prefix"]])
    assert revoked.exit_code == 0 and f"revoked token {mine['id']}" in revoked.stdout
    with pytest.raises(CorralError) as info:  # at once, although the server had cached it
        Client(server.url, carol).jobs()
    assert info.value.status == 401 and "token revoked" in str(info.value)
    assert "revoked" in runner.invoke(main, ["token", "list"]).stdout
    assert "no token 'corral_nope'" in failure(runner.invoke(main, ["token", "revoke", "corral_nope"]))
    assert "--expires" in failure(runner.invoke(main, ["token", "create", "--user", "x", "--expires", "soon"]), 2)

    expired = runner.invoke(main, ["token", "create", "--user", "dan", "--expires", "1s"]).stdout.strip()
    time.sleep(1.2)
    with pytest.raises(CorralError) as info:
        Client(server.url, expired).jobs()
    assert info.value.status == 401 and "token expired at " in str(info.value)


@pytest.mark.parametrize(("url", "says"), [
    ("localhost:8080", "is not an http(s) URL"),
    ("127.0.0.1:8080", "is not an http(s) URL"),
    ("http://127.0.0.1:8080/api/v1", "ends with /api/v1: give the server's base URL (http://127.0.0.1:8080)"),
])
def test_a_malformed_server_url_is_one_line(url: str, says: str) -> None:
    err = failure(CliRunner().invoke(main, ["jobs"], env={"CORRAL_URL": url, "CORRAL_TOKEN": "t"}))
    assert says in err


def test_cancel_of_a_finished_job_fails_saying_so(server: Server) -> None:
    jid = submit(server)
    with server.store.session() as s:
        job = s.get(Job, jid)
        assert job is not None
        job.state, job.finished_at = JobState.SUCCEEDED, time.time()
    err = failure(corral(server, "cancel", str(jid)))
    assert f"job {jid} already succeeded" in err
    with server.store.session() as s:  # nothing was requested of the controller
        job = s.get(Job, jid)
        assert job is not None and not job.cancel_requested and job.state == JobState.SUCCEEDED


def test_jobs_and_show_give_queue_position_start_estimate_preemptions_and_failure(server: Server) -> None:
    now = time.time()
    with server.store.session() as s:
        node = Node(name="node-a", index=0, preset="pcie-v100", alive=True, updated_at=now)  # (a preset the model knows)
        node.gpus = [Gpu(index=i, local_index=i, gpu_type="V100-32GB", mem_gb=32.0) for i in range(2)]
        s.add(node)
    running = submit(server)  # 2 GPUs for 60 s: the whole cluster
    waiting = submit(server)
    failed = submit(server)
    with server.store.session() as s:
        job = s.get(Job, running)
        assert job is not None
        job.state, job.attempt, job.progress, job.predicted_slowdown, job.preemptions = (
            JobState.RUNNING, 1, 0.5, 1.0, 2)
        # It holds both GPUs, as the controller records a placement: the estimate replays GPU by GPU.
        s.add_all([Allocation(job_id=running, attempt=1, rank=0, node="node-a", gpu=i, local_gpu=i, share=1.0,
                              allocated_at=now) for i in range(2)])
        gone = s.get(Job, failed)
        assert gone is not None
        gone.state, gone.finished_at, gone.error = JobState.FAILED, now, "node node-a was lost (restart policy fail)"
    table = ok(server, "jobs")
    header = table.splitlines()[0].split()
    assert header[8:11] == ["queue", "starts", "preempted"]
    row = next(ln for ln in table.splitlines() if ln.split()[0] == str(waiting))
    # Behind the running job's remaining 30 s (the replay's estimate counts down from when it was made, and a loaded
    # machine may take many seconds over the commands before it: bounded, not pinned).
    assert "#1" in row and re.search(r"in ~([1-9]|[12]\d|30) s", row), row
    assert " 2 " in next(ln for ln in table.splitlines() if ln.split()[0] == str(running))
    assert "node node-a was lost" in next(ln for ln in table.splitlines() if ln.split()[0] == str(failed))

    shown = ok(server, "show", str(waiting))
    assert "queue position     #1" in shown and re.search(r"start estimate     in ~([1-9]|[12]\d|30) s", shown), shown
    assert "preemptions 2" in ok(server, "show", str(running))
    assert "failure reason     node node-a was lost" in ok(server, "show", str(failed))


def test_models_and_policy(server: Server) -> None:
    out = ok(server, "models")
    assert "ResNet-50-bs64" in out and "BERT" in out
    assert {m["name"] for m in json.loads(ok(server, "models", "--json"))} >= {"ResNet-50-bs64", "MoE"}
    shown = ok(server, "policy")
    assert "active policy: (the controller default)" in shown and "tiresias" in shown
    err = failure(corral(server, "policy", "tiresias"))  # alice is not an admin
    assert "HTTP 403" in err
    with server.store.session() as s:
        root = create_token(s, "root", admin=True)
    assert ok(server, "policy", "tiresias", token=root).strip() == "active policy: tiresias"
    assert "active policy: tiresias" in ok(server, "policy")
    assert "name:" in failure(corral(server, "policy", "no-such-policy", token=root))


def test_client_commands_import_no_database_or_numerics() -> None:
    """`corral jobs` and friends only talk HTTP: importing the CLI must not pull in SQLAlchemy, Alembic, numpy, torch
    or Ray (they cost ~1.8 s of CPU per call)."""
    import subprocess
    import sys

    code = ("import sys, scheduler.cli.commands; heavy = {'sqlalchemy', 'alembic', 'numpy', 'torch', 'ray', 'scipy', "
            "'pydantic', 'flask'}; print(sorted({m.split('.')[0] for m in sys.modules} & heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ---- teams and users -----------------------------------------------------------------------------------------------


def admin_token(server: Server) -> str:
    with server.store.session() as s:
        return create_token(s, "root", admin=True)


def teams_table(out: str) -> dict[str, list[str]]:
    """`corral team list`'s rows by team name (the columns after the name)."""
    lines = out.splitlines()
    assert lines[0].split() == ["name", "quota", "borrow", "limit", "in", "use", "borrowed", "lent", "pending",
                                "running", "priority", "ceiling"]
    return {ln.split()[0]: ln.split()[1:] for ln in lines[1:-1]}


def test_team_create_list_set_and_delete(server: Server) -> None:
    root = admin_token(server)
    assert ok(server, "team", "create", "vision", "--quota", "4", "--borrow-limit", "2", token=root).strip() == (
        "created team vision: quota 4 GPUs, borrow limit 2")
    assert "borrow limit none" in ok(server, "team", "create", "nlp", "--quota", "1.5", token=root)
    with server.store.session() as s:  # vision borrows 1 GPU: 5 running on a quota of 4
        s.add_all([Node(name="node-a", index=0, preset="dgx-v100", alive=True, updated_at=time.time(),
                        gpus=[Gpu(index=i, local_index=i, gpu_type="V100-32GB", mem_gb=32.0) for i in range(8)])])
        s.scalars(select(User).where(User.name == "alice")).one().team = "vision"
    running, waiting = submit(server), submit(server, "--gpus", "1")
    with server.store.session() as s:
        job = s.get(Job, running)
        assert job is not None
        job.state, job.num_gpus = JobState.RUNNING, 5

    out = ok(server, "team", "list")  # any user may look
    rows = teams_table(out)
    # vision borrows 1 GPU; 8 - 5.5 = 2.5 GPUs are in no team's quota, so nlp lends nothing
    assert rows == {"default": ["0", "none", "0", "0", "0", "0", "0", "<=", "0"],
                    "nlp": ["1.5", "none", "0", "0", "0", "0", "0", "<=", "0"],
                    "vision": ["4", "2", "5", "1", "0", "1", "1", "<=", "0"]}
    assert "quotas add up to 5.5 of 8 GPUs" in out.splitlines()[-1]
    listing = json.loads(ok(server, "team", "list", "--json"))
    assert listing["cluster_gpus"] == 8 and [t["name"] for t in listing["teams"]] == ["default", "nlp", "vision"]

    assert ok(server, "team", "set", "nlp", "--quota", "2", "--borrow-limit", "0.5", token=root).strip() == (
        "team nlp: quota 2 GPUs, borrow limit 0.5, priority ceiling <= 0")
    assert ok(server, "team", "set", "nlp", "--no-borrow-limit", token=root).strip() == (
        "team nlp: quota 2 GPUs, borrow limit none, priority ceiling <= 0")
    err = failure(corral(server, "team", "set", "nlp", token=root), code=2)
    assert "nothing to change" in err
    err = failure(corral(server, "team", "set", "nlp", "--borrow-limit", "1", "--no-borrow-limit", token=root), 2)
    assert "not both" in err
    assert "--quota" in failure(corral(server, "team", "set", "nlp", "--quota", "inf", token=root), code=2)

    err = failure(corral(server, "team", "delete", "vision", token=root))
    assert "HTTP 409" in err and "team 'vision' has 2 job(s) pending or running" in err
    ok(server, "cancel", str(waiting))
    with server.store.session() as s:
        job = s.get(Job, running)
        assert job is not None
        job.state = JobState.SUCCEEDED
    assert ok(server, "team", "delete", "vision", token=root).strip() == (
        "team 'vision' deleted; 1 user(s) moved to 'default': alice")
    with server.store.session() as s:
        assert sorted(s.scalars(select(Team.name))) == ["default", "nlp"]


def test_team_errors_print_the_servers_message(server: Server) -> None:
    root = admin_token(server)
    with server.store.session() as s:
        before = sorted(s.scalars(select(Team.name)))
    err = failure(corral(server, "team", "create", "vision", "--quota", "4"))  # alice is not an admin
    assert "HTTP 403" in err and "not an admin" in err
    err = failure(corral(server, "team", "create", "vision", "--quota", "2e6", token=root))
    assert "HTTP 422" in err and "quota_gpus: must be at most 1000000 GPUs" in err
    err = failure(corral(server, "team", "create", "vision", "--quota", "-1", token=root), code=2)
    assert err == "corral: --quota: must be at least 0, got -1\n"  # refused before a request
    err = failure(corral(server, "team", "create", "-vision", "--quota", "1", token=root), code=2)
    assert "No such option" in err  # click takes it for a flag: it never reaches the server
    err = failure(corral(server, "team", "create", "a b", "--quota", "1", token=root))
    assert "HTTP 422" in err and "name:" in err
    err = failure(corral(server, "team", "create", "default", "--quota", "1", token=root))
    assert "HTTP 409" in err and "team 'default' already exists" in err
    err = failure(corral(server, "team", "set", "nope", "--quota", "1", token=root))
    assert "HTTP 404" in err and "team 'nope' not found" in err
    err = failure(corral(server, "team", "delete", "default", token=root))
    assert "HTTP 409" in err and "cannot be deleted" in err
    with server.store.session() as s:
        assert sorted(s.scalars(select(Team.name))) == before


def test_user_set_team_and_list(server: Server) -> None:
    root = admin_token(server)
    ok(server, "team", "create", "vision", "--quota", "2", token=root)
    assert ok(server, "user", "set-team", "alice", "vision", token=root).strip() == "user alice is in team vision"
    jid = submit(server)
    table = ok(server, "jobs")
    assert next(ln for ln in table.splitlines() if ln.split()[0] == str(jid)).split()[2:4] == ["alice", "vision"]
    assert json.loads(ok(server, "jobs", "--team", "vision", "--json"))["total"] == 1
    assert json.loads(ok(server, "jobs", "--team", "default", "--json"))["total"] == 0
    assert "team               vision" in ok(server, "show", str(jid))

    err = failure(corral(server, "user", "set-team", "alice", "default", token=root))
    assert "HTTP 409" in err and "user 'alice' has 1 job(s) pending or running in team 'vision'" in err
    err = failure(corral(server, "user", "set-team", "alice", "nope", token=root))
    assert "HTTP 422" in err and "team: team 'nope' does not exist" in err
    assert "HTTP 404" in failure(corral(server, "user", "set-team", "nobody", "vision", token=root))
    assert "HTTP 403" in failure(corral(server, "user", "set-team", "alice", "default"))
    listing = ok(server, "user", "list", token=root).splitlines()
    assert listing[0].split() == ["name", "team", "admin", "active", "jobs"]
    assert listing[1].split() == ["alice", "vision", "1"] and listing[2].split() == ["root", "default", "yes", "0"]
    assert [u["team"] for u in json.loads(ok(server, "user", "list", "--json", token=root))] == ["vision", "default"]


def test_token_create_puts_the_user_in_a_team(server: Server) -> None:
    runner = CliRunner()
    with server.store.session() as s:
        s.add(Team(name="vision", quota_gpus=2.0, created_at=time.time(), updated_at=time.time()))
    result = runner.invoke(main, ["token", "create", "--user", "vic", "--team", "vision"])
    assert result.exit_code == 0, result.output
    vic = result.stdout.strip()
    assert Client(server.url, vic).submit({"name": "a", "kind": "emulated", "model": "MoE", "num_gpus": 1,
                                           "duration_s": 1}).team == "vision"

    def state() -> tuple[dict[str, str], int]:
        with server.store.session() as s:
            return {u.name: u.team for u in s.scalars(select(User))}, len(s.scalars(select(ApiToken)).all())

    before = state()
    err = failure(runner.invoke(main, ["token", "create", "--user", "nel", "--team", "nlp"]), code=2)
    assert err.startswith("corral: --team: team 'nlp' does not exist; the teams are default, vision")
    err = failure(runner.invoke(main, ["token", "create", "--user", "vic", "--team", "default"]))
    assert err.startswith("corral: --team: user 'vic' has 1 job(s) pending or running in team 'vision'")
    assert state() == before  # no user, no token, no move
    result = runner.invoke(main, ["token", "create", "--user", "alice", "--team", "vision"])  # no active jobs
    assert result.exit_code == 0 and state()[0]["alice"] == "vision"


def test_a_servers_message_over_several_lines_prints_as_one(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """Whatever the server (or a proxy before it) answers, the CLI prints one line: the message folded."""
    def refuse(self: Client, **kwargs: object) -> None:
        raise CorralError("HTTP 400: bad request\n  from a proxy\n", status=400)

    monkeypatch.setattr(Client, "jobs", refuse)
    assert failure(corral(server, "jobs")) == "corral: HTTP 400: bad request from a proxy\n"


def test_a_job_file_with_nan_is_refused_by_name(server: Server, tmp_path: Path) -> None:
    spec = tmp_path / "job.json"
    spec.write_text('{"name": "a", "model": "MoE", "num_gpus": 1, "duration_s": NaN}')
    err = failure(corral(server, "submit", "--file", str(spec)))
    assert err == f"corral: {spec} is not valid JSON: NaN is not a JSON number\n"


def a_job(job_id: int, state: str, name: str, **fields: object) -> dict[str, object]:
    """A job as GET /jobs lists it."""
    return {"id": job_id, "name": name, "user": "alice-researcher", "team": "vision-team", "state": state,
            "num_gpus": 4, "model": "Transformer-XL-bs32", "progress": 0.42, "queue_position": None,
            "start_estimate_s": None, "preemptions": 0, "allocation": [], "pending_reason": None, "error": None,
            "exit_code": None} | fields


def test_jobs_table_is_readable_at_80_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """At 80 columns rich squeezed all 13 columns ("fai…", "runn…"): now ids, states, users, GPUs and progress stay
    whole, the name ellipsizes, and the columns left out are named under the table."""
    from rich.console import Console

    import scheduler.cli.job_commands as commands

    jobs = [
        a_job(10412, "failed", "a-very-long-experiment-name-for-sweep-17", error="node node-a was lost"),
        a_job(10413, "running", "bert", preemptions=2,
              allocation=[{"node": "node-3", "local_gpu": g, "share": 1} for g in range(4)]),
        a_job(10414, "pending", "resnet", queue_position=3, start_estimate_s=1800,
              pending_reason="waiting for 4 GPUs on one node"),
        a_job(10415, "succeeded", "x", progress=1.0),
        a_job(10416, "cancelled", "y"),
    ]
    monkeypatch.setattr(Client, "jobs", lambda self, **kw: m.JobList.from_json({"jobs": jobs, "total": len(jobs)}))
    monkeypatch.setattr(commands, "console", lambda: Console(width=80, highlight=False))
    result = CliRunner().invoke(main, ["jobs"], env={"CORRAL_TOKEN": "t"})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), result.stdout
    assert lines[0].split()[:6] == ["id", "name", "user", "state", "gpus", "progress"]
    for job in jobs:
        row = next(line for line in lines if line.split()[:1] == [str(job["id"])])
        assert f" {job['state']} " in row and " alice-researcher " in row and f"{job['progress']:.0%}" in row, row
    assert "a-very-long-experi…" in result.stdout  # the name gives way, not the state
    footer = " ".join(result.stdout.split("1-5 of 5 jobs\n", 1)[1].split())
    assert footer.startswith("left out at this width: ") and "reason" in footer and "model" in footer


def test_jobs_table_shows_every_column_when_there_is_room() -> None:
    from rich.console import Console

    from scheduler.cli.jobs_table import JOB_COLUMNS, jobs_table

    jobs = [a_job(1, "pending", "resnet", queue_position=1, start_estimate_s=30, pending_reason="quota",
                  preemptions=1, allocation=[{"node": "n", "local_gpu": 0, "share": 0.5}])]
    table, hidden = jobs_table([m.JobSummary.from_json(j) for j in jobs], 200)
    assert hidden == [] and [c.header for c in table.columns] == list(JOB_COLUMNS)
    out = Console(width=200, record=True)
    out.print(table)
    text = out.export_text()
    assert "n: GPU 0 ×0.5" in text and "in ~30 s" in text and "quota" in text


def test_token_create_says_which_store_it_wrote_to(server: Server, corral_home: Path) -> None:
    result = CliRunner().invoke(main, ["token", "create", "--user", "carol"])
    assert result.exit_code == 0, result.output
    assert result.stderr == f"token written to sqlite:///{corral_home / 'corral.db'} (CORRAL_HOME={corral_home})\n"


def test_token_create_in_a_new_store_warns_and_the_server_says_where_tokens_come_from(
        server: Server, tmp_path: Path) -> None:
    """The shell without the server's CORRAL_HOME: the token lands in a new store the server never reads. Both the
    command and the server's 401 say so, instead of sending the user round to `corral token create` again."""
    elsewhere = tmp_path / "other-home"
    result = CliRunner().invoke(main, ["token", "create", "--user", "dave"], env={"CORRAL_HOME": str(elsewhere)})
    assert result.exit_code == 0, result.output
    written, warning = result.stderr.splitlines()
    assert written == f"token written to sqlite:///{elsewhere / 'corral.db'} (CORRAL_HOME={elsewhere})"
    assert warning.startswith("corral: warning: no store was there, so a new, empty one was made")
    err = failure(corral(server, "jobs", token=result.stdout.strip()))
    assert err == ("corral: HTTP 401: invalid token: create a new one with `corral token create` run with this "
                   "server's CORRAL_HOME (or DATABASE_URL)\n")
    again = CliRunner().invoke(main, ["token", "create", "--user", "erin"], env={"CORRAL_HOME": str(elsewhere)})
    assert again.exit_code == 0 and "warning" not in again.stderr  # that store exists now


def test_token_create_names_database_url_without_its_password(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'db.sqlite'}"
    result = CliRunner().invoke(main, ["token", "create", "--user", "fay"], env={"DATABASE_URL": url})
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines()[0] == f"token written to {url} (DATABASE_URL)"

    from scheduler.cli.token_commands import store_text

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DATABASE_URL", "postgresql://corral:s3cret@db/corral")
        assert store_text("postgresql+psycopg://corral:s3cret@db/corral") == (
            "postgresql+psycopg://corral:***@db/corral (DATABASE_URL)")


def test_submit_without_kind_makes_an_emulated_job_and_file_kind_is_kept(server: Server, tmp_path: Path) -> None:
    job = json.loads(ok(server, "submit", "--name", "a", "--model", "MoE", "--gpus", "1", "--duration", "5", "--json"))
    assert job["kind"] == "emulated"
    spec = tmp_path / "job.json"
    spec.write_text(json.dumps({"name": "c", "kind": "command", "model": "MoE", "num_gpus": 1,
                                "entrypoint": "true"}))
    assert json.loads(ok(server, "submit", "--file", str(spec), "--json"))["kind"] == "command"


def test_show_gives_a_finished_jobs_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """A finished job's `started_at` (the current run's) is cleared: `corral show` gives its first start instead of
    leaving the line out."""
    finished = m.JobDetail.from_json({"id": 9, "name": "done", "state": "succeeded", "kind": "command",
                                      "model": "generic", "num_gpus": 1, "duration_s": 60, "submitted_at": 1000.0,
                                      "started_at": None, "first_started_at": 1010.0, "finished_at": 1070.0,
                                      "events": [], "decisions": [], "allocation": []})
    monkeypatch.setattr(Client, "job", lambda self, job_id: finished)
    result = CliRunner().invoke(main, ["show", "9"], env={"CORRAL_TOKEN": "t"})
    assert result.exit_code == 0, result.output
    from scheduler.cli.client_text import when

    started = next(line for line in result.stdout.splitlines() if line.split()[:1] == ["started"])
    assert started.split()[1:] == when(1010.0).split()
