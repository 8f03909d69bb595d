"""Who may rank how high (issue 46, item 1), on SQLite and PostgreSQL (the `store` fixture): a non-admin's priority,
non-preemptibility and priority class are held to the ceiling an admin granted (per user over per team over the
built-in 0, preemptible only, no class), at submit, resubmit, arrays, PATCH and class resolution; a refusal is a 403
naming the limit and stores nothing; admins are exempt; `corral user limits` and `corral team` show and set it; and
migration 0018 adds the settings as "not set"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from alembic import command
from click.testing import CliRunner
from conftest import ApiCalls
from sqlalchemy import create_engine, func, select, text

from scheduler.cli.commands import main
from scheduler.live import priority_ceilings as pc
from scheduler.live.store import Store
from scheduler.live.store import queries as q
from scheduler.live.store.db import alembic_config
from scheduler.live.store.models import Job, JobArray, JobEvent
from tests.conftest import served
from web import create_app

API = "/api/v1"
JOB = {"name": "train", "kind": "emulated", "model": "ResNet-50-bs64", "num_gpus": 1, "duration_s": 600}
ATTACK = 1_000_000


class Env(ApiCalls):
    def __init__(self, store: Store) -> None:
        self.store = store
        with store.session() as s:
            self.tokens = {"root": q.create_token(s, "root", admin=True), "alice": q.create_token(s, "alice"),
                           "bob": q.create_token(s, "bob")}
        self.app = create_app(store, notify=lambda: None)
        self.client = self.app.test_client()
        self.ok("POST", "/priority-classes", {"name": "serving", "value": 1000, "preemptible": False}, status=201)
        self.ok("POST", "/priority-classes", {"name": "low", "value": -5}, status=201)

    def refused(self, method: str, path: str, body: Any, who: str = "alice") -> str:
        resp = self.call(method, path, body, who)
        assert resp.status_code == 403, (body, resp.json)
        return str(resp.json["message"])

    def stored(self) -> tuple[int, int, int, list[tuple[int, int, bool]]]:
        """Jobs, events, arrays, and every job's (id, priority, preemptible): what a refusal must leave alone."""
        with self.store.session() as s:
            count = [int(s.scalar(select(func.count()).select_from(m)) or 0) for m in (Job, JobEvent, JobArray)]
            rows = [(j.id, j.priority, j.preemptible) for j in s.scalars(select(Job).order_by(Job.id))]
        return count[0], count[1], count[2], rows


@pytest.fixture
def env(store: Store, corral_home: Path) -> Env:
    return Env(store)


def test_a_non_admin_above_the_ceiling_is_refused_every_way_and_nothing_is_stored(env: Env) -> None:
    mine = env.ok("POST", "/jobs", JOB, who="alice", status=201)
    assert (mine["priority"], mine["preemptible"]) == (0, True)
    before = env.stored()
    ceiling = "priority: 1000000 is above your ceiling of 0 (the built-in default; an admin changes it: " \
              "`corral user limits alice --max-priority N`, or for the team `corral team set default --max-priority N`)"
    assert env.refused("POST", "/jobs", JOB | {"priority": ATTACK, "preemptible": False}) == ceiling
    assert env.refused("POST", "/jobs", JOB | {"priority": 1}).startswith("priority: 1 is above your ceiling of 0")
    assert env.refused("POST", "/jobs", JOB | {"priority": ATTACK, "array": {"count": 3}}) == ceiling
    assert env.refused("POST", f"/jobs/{mine['id']}/resubmit", {"priority": ATTACK}) == ceiling
    message = env.refused("POST", "/jobs", JOB | {"preemptible": False})
    assert message.startswith("preemptible: false is not allowed for you (the built-in default;")
    assert "--allow-nonpreemptible" in message
    for how in (("POST", "/jobs", JOB | {"priority_class": "serving"}),
                ("POST", "/jobs", JOB | {"priority_class": "serving", "array": {"count": 2}}),
                ("POST", f"/jobs/{mine['id']}/resubmit", {"priority_class": "serving"})):
        message = env.refused(*how)
        assert message.startswith("priority_class: 'serving' (priority 1000, not preemptible) is above your ceiling "
                                  "(priority 0, preemptible only) and not among the classes you may name (none: "), \
            message
        assert "`corral user limits alice --priority-classes A,B`" in message
    assert "only an admin raises" in env.refused("PATCH", f"/jobs/{mine['id']}", {"priority": ATTACK})
    assert env.stored() == before
    # Within the ceiling: as before.
    assert env.ok("POST", "/jobs", JOB | {"priority": -3}, who="alice", status=201)["priority"] == -3
    low = env.ok("POST", "/jobs", JOB | {"priority_class": "low"}, who="alice", status=201)
    assert (low["priority"], low["priority_class"]) == (-5, "low")  # a class within the ceiling may be named
    assert env.ok("POST", f"/jobs/{mine['id']}/resubmit", {"priority": 0}, who="alice", status=201)["priority"] == 0


def test_a_patch_is_held_to_the_ceiling_an_admin_lowered_since(env: Env) -> None:
    env.ok("PATCH", "/users/alice/limits", {"max_priority": 100})
    job = env.ok("POST", "/jobs", JOB | {"priority": 100}, who="alice", status=201)
    env.ok("PATCH", "/users/alice/limits", {"max_priority": 10})
    before = env.stored()
    message = env.refused("PATCH", f"/jobs/{job['id']}", {"priority": 50})
    assert message == ("priority: 50 is above your ceiling of 10 (set for alice by an admin; an admin changes it: "
                       "`corral user limits alice --max-priority N`, or for the team `corral team set default "
                       "--max-priority N`)")
    assert env.stored() == before
    assert env.ok("PATCH", f"/jobs/{job['id']}", {"priority": 10}, who="alice")["priority"] == 10
    # The resubmission of the job as it was (priority 100) is held to today's ceiling too.
    assert env.refused("POST", f"/jobs/{job['id']}/resubmit", {"priority": 100}).startswith(
        "priority: 100 is above your ceiling of 10")


def test_an_admin_raises_a_users_or_a_teams_ceiling_and_the_users_setting_wins(env: Env) -> None:
    env.ok("POST", "/teams", {"name": "ml", "quota_gpus": 0}, status=201)
    env.ok("PATCH", "/users/alice", {"team": "ml"})
    team = env.ok("PATCH", "/teams/ml", {"max_priority": 100, "priority_classes": ["serving", "serving"]})
    assert team["priority_ceiling"] == {"max_priority": 100, "allow_nonpreemptible": False,
                                        "priority_classes": ["serving"]}
    assert team["ceiling_sources"] == {"max_priority": "team", "allow_nonpreemptible": "built-in",
                                       "priority_classes": "team"}
    assert env.ok("POST", "/jobs", JOB | {"priority": 100}, who="alice", status=201)["priority"] == 100
    assert env.refused("POST", "/jobs", JOB | {"priority": 101}) == (
        "priority: 101 is above your ceiling of 100 (set for team ml by an admin; an admin changes it: "
        "`corral user limits alice --max-priority N`, or for the team `corral team set ml --max-priority N`)")
    served = env.ok("POST", "/jobs", JOB | {"priority_class": "serving"}, who="alice", status=201)
    assert (served["priority"], served["preemptible"]) == (1000, False)  # the class the team may name
    # The user's own settings override the team's, lower as well as higher.
    mine = env.ok("PATCH", "/users/alice/limits", {"max_priority": 5, "priority_classes": [],
                                                   "allow_nonpreemptible": True})
    assert (mine["max_priority"], mine["allow_nonpreemptible"], mine["priority_classes"]) == (5, True, [])
    assert {k: mine["sources"][k] for k in pc.CEILING_NAMES} == dict.fromkeys(pc.CEILING_NAMES, "user")
    assert env.refused("POST", "/jobs", JOB | {"priority": 100}).startswith(
        "priority: 100 is above your ceiling of 5 (set for alice by an admin;")
    assert "not among the classes you may name (none: set for alice" in env.refused(
        "POST", "/jobs", JOB | {"priority_class": "serving"})
    pinned = env.ok("POST", "/jobs", JOB | {"priority": 5, "preemptible": False}, who="alice", status=201)
    assert (pinned["priority"], pinned["preemptible"]) == (5, False)
    # Cleared: the team's apply again.
    back = env.ok("PATCH", "/users/alice/limits", {"max_priority": None, "priority_classes": None,
                                                   "allow_nonpreemptible": None})
    assert (back["max_priority"], back["allow_nonpreemptible"], back["priority_classes"]) == (100, False, ["serving"])
    assert back["sources"]["max_priority"] == "team" and back["sources"]["allow_nonpreemptible"] == "built-in"
    # Each user's ceiling on the dashboard's team page (GET /stats/teams) and GET /teams.
    stats = {t["name"]: t for t in env.ok("GET", "/stats/teams", who="bob")["teams"]}
    assert stats["ml"]["priority_ceiling"]["max_priority"] == 100
    assert stats["default"]["priority_ceiling"] == {"max_priority": 0, "allow_nonpreemptible": False,
                                                    "priority_classes": []}


def test_bob_outside_the_team_keeps_the_built_in_ceiling(env: Env) -> None:
    env.ok("POST", "/teams", {"name": "ml", "quota_gpus": 0}, status=201)
    env.ok("PATCH", "/users/alice", {"team": "ml"})
    env.ok("PATCH", "/teams/ml", {"max_priority": 100, "allow_nonpreemptible": True})
    assert env.ok("POST", "/jobs", JOB | {"priority": 100, "preemptible": False}, who="alice", status=201)
    assert env.refused("POST", "/jobs", JOB | {"priority": 100}, who="bob").startswith(
        "priority: 100 is above your ceiling of 0 (the built-in default;")
    assert env.refused("POST", "/jobs", JOB | {"preemptible": False}, who="bob").startswith("preemptible:")


def test_admins_are_exempt(env: Env) -> None:
    theirs = env.ok("POST", "/jobs", JOB, who="alice", status=201)
    mine = env.ok("POST", "/jobs", JOB | {"priority": ATTACK, "preemptible": False}, status=201)
    assert (mine["priority"], mine["preemptible"]) == (ATTACK, False)
    assert env.ok("POST", "/jobs", JOB | {"priority_class": "serving"}, status=201)["priority"] == 1000
    assert env.ok("POST", "/jobs", JOB | {"priority": ATTACK, "array": {"count": 2}}, status=201)
    again = env.ok("POST", f"/jobs/{theirs['id']}/resubmit", {"priority": ATTACK}, status=201)
    assert (again["priority"], again["user"]) == (ATTACK, "root")  # the admin's own job
    assert env.ok("PATCH", f"/jobs/{theirs['id']}", {"priority": ATTACK})["priority"] == ATTACK
    assert env.ok("GET", "/users/root/limits")["exempt"] is True


def test_ceilings_are_set_by_admins_only_and_checked_by_name(env: Env) -> None:
    env.ok("POST", "/teams", {"name": "ml", "quota_gpus": 0}, status=201)
    assert env.call("PATCH", "/users/alice/limits", {"max_priority": ATTACK}, who="alice").status_code == 403
    assert env.call("PATCH", "/teams/ml", {"max_priority": ATTACK}, who="alice").status_code == 403
    for path in ("/users/alice/limits", "/teams/ml"):
        for body, field in (({"max_priority": 2 * ATTACK}, "max_priority"), ({"max_priority": "9"}, "max_priority"),
                            ({"max_priority": True}, "max_priority"), ({"allow_nonpreemptible": "yes"},
                                                                        "allow_nonpreemptible"),
                            ({"priority_classes": "serving"}, "priority_classes"),
                            ({"priority_classes": ["-x"]}, "priority_classes"),
                            ({"priority_classes": ["nope", "serving"]}, "priority_classes")):
            resp = env.call("PATCH", path, body)
            assert resp.status_code == 422 and field in resp.json["errors"]["json"], (path, body, resp.json)
    assert "no priority class 'nope' (known: serving, low)" in env.call(
        "PATCH", "/teams/ml", {"priority_classes": ["nope"]}).json["message"]
    assert env.call("PATCH", "/limits", {"max_priority": 5}).status_code == 422  # per user and team, not cluster
    with env.store.session() as s:
        alice = q.user_by_name(s, "alice")
        assert alice is not None
        assert q.priority_ceiling(s, alice.id) == pc.combine("alice", "default", {}, {})
        assert q.team_ceiling(q.team_by_name(s, "ml")).sources == dict.fromkeys(pc.CEILING_NAMES, "built-in")  # type: ignore[arg-type]


def test_settings_combine_user_over_team_over_built_in() -> None:
    c = pc.combine("ann", "ml", {"max_priority": -1}, {"max_priority": 50, "allow_nonpreemptible": True,
                                                        "priority_classes": ["a"]})
    assert (c.max_priority, c.allow_nonpreemptible, c.priority_classes) == (-1, True, ("a",))
    assert dict(c.sources) == {"max_priority": "user", "allow_nonpreemptible": "team", "priority_classes": "team"}
    with pytest.raises(pc.AboveCeiling) as refused:
        pc.check(c, priority=0)  # a user may be held below the cluster's default priority too
    assert refused.value.field == "priority"
    pc.check(c, priority=-1, preemptible=False)
    pc.check(c, priority=0, named=("a", 10**6, False))  # a class the team may name, whatever its figures
    pc.check(c, priority=0, named=("b", -2, False))  # a class within the ceiling: nothing granted by naming it
    with pytest.raises(pc.AboveCeiling):
        pc.check(c, priority=0, named=("b", 0, True))
    built_in = pc.combine("ann", "ml", {}, {})
    assert (built_in.max_priority, built_in.allow_nonpreemptible, built_in.priority_classes) == (0, False, ())


def test_the_cli_shows_and_sets_a_users_and_a_teams_ceiling(env: Env) -> None:
    runner = CliRunner()
    env.ok("POST", "/teams", {"name": "ml", "quota_gpus": 0}, status=201)
    with served(env.app) as url:
        def corral(*args: str, who: str = "root", code: int = 0) -> str:
            result = runner.invoke(main, [*args, "--url", url, "--token", env.tokens[who]])
            assert result.exit_code == code, result.output
            return result.output

        def rows(out: str) -> dict[str, list[str]]:
            return {label: ln.split()[len(label.split()):] for ln in out.splitlines()
                    for label in ("highest priority", "non-preemptible", "priority classes")
                    if ln.strip().startswith(label)}

        assert rows(corral("user", "limits", "alice")) == {"highest priority": ["0", "built-in"],
                                                          "non-preemptible": ["no", "built-in"],
                                                          "priority classes": ["none", "built-in"]}
        out = corral("user", "limits", "alice", "--max-priority", "50", "--allow-nonpreemptible",
                     "--priority-classes", "serving,low")
        assert rows(out) == {"highest priority": ["50", "user"], "non-preemptible": ["allowed", "user"],
                             "priority classes": ["serving,", "low", "user"]}
        assert "submitted job" in corral("submit", "--name", "r", "--model", "ResNet-50-bs64", "--gpus", "1", "--duration", "60",
                                         "--priority", "50", "--not-preemptible", who="alice")
        refused = corral("submit", "--name", "r", "--model", "ResNet-50-bs64", "--gpus", "1", "--duration", "60", "--priority",
                         "51", who="alice", code=1)
        assert "HTTP 403: priority: 51 is above your ceiling of 50 (set for alice by an admin" in refused
        out = corral("user", "limits", "alice", "--clear", "max-priority", "--no-allow-nonpreemptible",
                     "--priority-classes", "")
        assert rows(out) == {"highest priority": ["0", "built-in"], "non-preemptible": ["no", "user"],
                             "priority classes": ["none", "user"]}
        assert "given and cleared" in corral("user", "limits", "alice", "--max-priority", "1", "--clear",
                                             "max-priority", code=2)
        assert corral("team", "set", "ml", "--max-priority", "20", "--allow-nonpreemptible", "--priority-classes",
                      "serving").strip() == ("team ml: quota 0 GPUs, borrow limit none, priority ceiling <= 20; "
                                             "non-preemptible; classes serving")
        listed = {ln.split()[0]: ln for ln in corral("team", "list", who="alice").splitlines()}
        assert listed["ml"].rstrip().endswith("<= 20; non-preemptible; classes serving")
        assert listed["default"].rstrip().endswith("<= 0")
        assert corral("team", "set", "ml", "--clear", "max-priority", "--clear", "priority-classes").strip().endswith(
            "priority ceiling <= 0; non-preemptible")
        assert "HTTP 403" in corral("team", "set", "ml", "--max-priority", "5", who="alice", code=1)
        assert "HTTP 422" in corral("team", "set", "ml", "--priority-classes", "nope", code=1)
        assert "--clear" in corral("limits", "--clear", "max-priority", code=2)  # not a cluster-wide setting


def test_migration_0018_adds_the_settings_as_not_set(db_url: str) -> None:
    engine = create_engine(db_url)
    cfg = alembic_config(db_url)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0017")
        conn.execute(text("INSERT INTO users (name, admin, created_at) VALUES ('ann', false, 1.0)"))
        conn.execute(text("INSERT INTO user_limits (user_id, max_pending, updated_at) SELECT id, 7, 1.0 FROM users"))
        command.upgrade(cfg, "0018")
        assert conn.execute(text("SELECT max_pending, max_priority, allow_nonpreemptible, priority_classes "
                                 "FROM user_limits")).all() == [(7, None, None, None)]
        assert conn.execute(text("SELECT name, max_priority, allow_nonpreemptible, priority_classes FROM teams")
                            ).all() == [("default", None, None, None)]
        conn.execute(text("UPDATE teams SET max_priority = 5, allow_nonpreemptible = true"))
        command.downgrade(cfg, "0017")
        assert conn.execute(text("SELECT max_pending FROM user_limits")).all() == [(7,)]
    engine.dispose()
    check = create_engine(db_url)
    with check.connect() as conn:
        for table in ("teams", "user_limits"):
            columns = conn.execute(text(
                "SELECT column_name FROM information_schema.columns WHERE table_name = :t "
                "AND table_schema = current_schema()"
                if db_url.startswith("postgresql") else "SELECT name FROM pragma_table_info(:t)"), {"t": table}
            ).scalars().all()
            assert "max_priority" not in columns and "priority_classes" not in columns, (table, columns)
    check.dispose()
    store = Store.open(db_url)  # upgrades to the head again: everyone on the built-in ceiling
    with store.session() as s:
        ann = q.user_by_name(s, "ann")
        assert ann is not None
        c = q.priority_ceiling(s, ann.id)
        assert (c.max_priority, c.allow_nonpreemptible, c.priority_classes) == (0, False, ())
    store.close()
