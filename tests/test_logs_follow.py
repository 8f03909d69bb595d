"""Following a job's logs (`GET /jobs/ID/logs?rank=R&offset=N[&wait_s=S]`, `Client.follow_logs`, `corral logs
--follow`): what a log gains comes once and in order, a wait ends at the first news or when the run ends, the
follower moves on to the job's next run, and it stops when the job ends. Without Ray: the test writes the workers'
log files and moves the job's state itself, from threads, as the controller would."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import served, wait_until
from sqlalchemy import update

from corral import Client, LogText
from corral.models import JobDetail
from scheduler.cli.commands import main
from scheduler.live.job_files import log_path
from scheduler.live.store import Store
from scheduler.live.store import queries as q
from scheduler.live.store.models import Job
from web import create_app


class Env:
    def __init__(self, store: Store, url: str, token: str, job_id: int) -> None:
        self.store, self.url, self.token, self.job_id = store, url, token, job_id
        self.api = Client(url, token)

    def set(self, **values: object) -> None:
        with self.store.session(write=True) as s:
            s.execute(update(Job).where(Job.id == self.job_id).values(**values))

    def write(self, attempt: int, rank: int, text: str) -> None:
        path = log_path(self.store.id, self.job_id, attempt, rank)
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            f.write(text)


@pytest.fixture
def env(corral_home: Path) -> Iterator[Env]:
    store = Store.open()
    with store.session(write=True) as s:
        token = q.create_token(s, "alice")
        user = q.ensure_user(s, "alice")
        job, _ = q.submit(s, user, {"name": "j", "kind": "emulated", "model": "ResNet-50-bs64", "num_gpus": 2,
                                    "duration_s": 60.0})
    e = None
    with served(create_app(store)) as url:
        e = Env(store, url, token, job.id)
        e.set(state="running", attempt=1)
        yield e
    store.close()


def test_a_read_from_an_offset_gives_what_the_log_gained_and_where_it_ends(env: Env) -> None:
    env.write(1, 0, "one\ntwo\n")
    first = env.api.logs(env.job_id, tail=1)
    assert first.logs and first.logs[0].text == "two\n" and first.logs[0].end == 8
    assert (first.state, first.current_attempt) == ("running", 1)
    env.write(1, 0, "three\nfour")  # a line still being written comes too: the next read starts after it
    (again,) = env.api.logs(env.job_id, rank=0, offset=8).logs or []
    assert again.text == "three\nfour" and again.end == 18
    assert env.api.logs(env.job_id, rank=0, offset=18).to_json()["logs"] == [{
        "rank": 0, "path": f"job-{env.job_id}/attempt-1/rank-0.log", "text": "", "end": 18}]


def test_bad_follow_requests_name_the_field() -> None:
    from marshmallow import ValidationError

    from web.schemas.logs import LogsArgs

    with pytest.raises(ValidationError) as no_rank:
        LogsArgs().load({"offset": "5"})
    assert no_rank.value.messages == {"rank": ["give the rank whose log to follow"]}
    with pytest.raises(ValidationError) as no_offset:
        LogsArgs().load({"wait_s": "2", "rank": "0"})
    assert "wait_s" in no_offset.value.messages
    with pytest.raises(ValidationError) as too_long:
        LogsArgs().load({"wait_s": "600", "rank": "0", "offset": "0"})
    assert "wait_s" in too_long.value.messages


def test_a_wait_ends_at_the_first_news_and_at_once_when_the_run_is_over(env: Env) -> None:
    env.write(1, 0, "start\n")
    threading.Timer(0.5, env.write, (1, 0, "news\n")).start()
    t0 = time.monotonic()
    (got,) = env.api.logs(env.job_id, rank=0, offset=6, wait_s=15).logs or []
    assert got.text == "news\n" and time.monotonic() - t0 < 10  # not the whole 15 s
    env.set(state="succeeded", exit_code=0)
    t0 = time.monotonic()
    done = env.api.logs(env.job_id, rank=0, offset=got.end, wait_s=15)
    assert done.logs and done.logs[0].text == "" and done.state == "succeeded" and time.monotonic() - t0 < 5


def test_follow_logs_reads_every_rank_moves_to_the_next_run_and_stops_when_the_job_ends(env: Env) -> None:
    env.write(1, 0, "r0 a\n")
    env.write(1, 1, "r1 a\n")
    seen: list[LogText] = []

    def script() -> None:
        wait_until("the follower read the first lines", lambda: len(seen) >= 2, timeout=30)
        env.write(1, 1, "r1 b\n")
        wait_until("the follower read r1 b", lambda: any(c.text == "r1 b\n" for c in seen), timeout=30)
        env.write(1, 0, "r0 last words\n")
        env.set(state="pending", attempt=1)  # requeued: the next run is attempt 2
        env.write(2, 0, "r0 again\n")
        env.set(state="running", attempt=2)
        wait_until("the follower reached run 2", lambda: any(c.text == "r0 again\n" for c in seen), timeout=30)
        env.write(2, 0, "done\n")
        env.set(state="succeeded", exit_code=0)

    t = threading.Thread(target=script, daemon=True)
    t.start()
    for chunk in env.api.follow_logs(env.job_id, poll_s=0.1, wait_s=2):
        seen.append(chunk)  # (the script thread watches `seen` grow while the follower runs)
    t.join(30)
    texts = [(c.attempt, c.rank, c.text) for c in seen]
    assert texts[:2] == [(1, 0, "r0 a\n"), (1, 1, "r1 a\n")]
    assert (1, 1, "r1 b\n") in texts and (1, 0, "r0 last words\n") in texts
    assert texts.index((1, 0, "r0 last words\n")) < texts.index((2, None, "")) < texts.index((2, 0, "r0 again\n"))
    assert "".join(c.text for c in seen if c.attempt == 2) == "r0 again\ndone\n"  # once each, in order


def test_corral_logs_follow_prints_as_it_comes_and_says_how_the_job_ended(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    env.write(1, 0, "".join(f"line {i}\n" for i in range(30)))
    read = threading.Event()  # the follower's first read (the last 10 lines) has come back
    real = Client.logs

    def logs(self: Client, *args, **kwargs):  # type: ignore[no-untyped-def]
        try:
            return real(self, *args, **kwargs)
        finally:
            read.set()

    monkeypatch.setattr(Client, "logs", logs)

    def finish() -> None:
        # After the first read, not after a fixed sleep: on a loaded machine the line came before the follower's
        # first read, and was then part of the last 10.
        wait_until("the follower read the last lines", read.is_set, timeout=30)
        env.write(1, 0, "the end\n")
        env.set(state="failed", exit_code=3)

    threading.Thread(target=finish, daemon=True).start()
    result = CliRunner().invoke(main, ["logs", str(env.job_id), "--follow", "--rank", "0"],
                                env={"CORRAL_URL": env.url, "CORRAL_TOKEN": env.token})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines == [f"line {i}" for i in range(20, 30)] + ["the end"]  # the last 10, then the news
    assert f"job {env.job_id}: failed (exit code 3)" in result.stderr
    refused = CliRunner().invoke(main, ["logs", str(env.job_id), "--follow", "--attempt", "1"],
                                 env={"CORRAL_URL": env.url, "CORRAL_TOKEN": env.token})
    assert refused.exit_code == 2 and "--follow follows the job's current run" in refused.output


def test_corral_logs_follow_on_a_pending_job_says_it_waits_then_follows_its_run(
        env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    env.set(state="pending", attempt=0, pending_reason="waits for 2 GPUs (0 free)")
    asked = threading.Event()
    job = Client.job

    def job_then_tell(self: Client, job_id: int) -> JobDetail:
        answer = job(self, job_id)
        asked.set()
        return answer

    monkeypatch.setattr(Client, "job", job_then_tell)

    def run() -> None:  # the controller starts it once the follower has seen it pending, then it ends
        asked.wait(30)  # (bounded: a follower that never asks still ends, and the assertions say what it missed)
        env.set(state="running", attempt=1)
        env.write(1, 0, "started\n")
        env.set(state="succeeded", exit_code=0)

    threading.Thread(target=run, daemon=True).start()
    result = CliRunner().invoke(main, ["logs", str(env.job_id), "--follow", "--rank", "0"],
                                env={"CORRAL_URL": env.url, "CORRAL_TOKEN": env.token})
    assert result.exit_code == 0, result.output
    assert result.stderr.startswith(f"job {env.job_id} is pending (waits for 2 GPUs (0 free)); its logs follow once "
                                    "it starts")
    assert "started" in result.stdout.splitlines() and f"job {env.job_id}: succeeded" in result.stderr


def test_corral_logs_says_when_there_is_nothing_to_print(env: Env) -> None:
    """Issue 51: `corral logs ID --rank R` printed nothing and exited 0 where the log was empty; it now says so."""
    def logs(*args: str) -> tuple[str, str]:
        result = CliRunner().invoke(main, ["logs", str(env.job_id), *args],
                                    env={"CORRAL_URL": env.url, "CORRAL_TOKEN": env.token})
        assert result.exit_code == 0, result.output
        return result.stdout, result.stderr

    assert logs("--rank", "1") == ("", f"job {env.job_id} (running): rank 1's log is empty for attempt 1\n")
    env.write(1, 0, "hello\n")
    assert logs("--rank", "0") == ("hello\n", "")
    env.set(state="pending", attempt=0)
    assert logs() == ("", f"job {env.job_id} (pending): no logs for attempt 0\n")
