"""Regenerate the README's picture: the dashboard's cluster map of a real `corral serve` with a mixed workload.

    .venv/bin/python docs/tools/cluster_map.py            # writes docs/img/cluster-map.png

It starts `corral serve` (4 virtual nodes x 8 virtual GPUs, a local Ray cluster, SQLite in a temporary folder),
submits 40 emulated jobs (fractional MPS shares, whole GPUs and a gang across nodes, more than the cluster holds),
waits until the controller has placed each or said why it waits, and photographs the map in Debian's chromium
(Playwright, headless). Needs the `test` extra and /usr/bin/chromium.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[2]
CORRAL = Path(sys.executable).with_name("corral")
CHROMIUM = "/usr/bin/chromium"
SIZES = [0.25, 12, 0.5, 1, 0.25, 0.5, 1, 2, 0.25, 0.5, 1, 0.25, 4, 0.5, 0.25, 1, 0.5, 0.25, 2, 0.5]
MODELS = ["ResNet-50-bs64", "Transformer-XL", "LM-bs20", "ResNet-18-bs128", "MoE"]


def wait(what: str, pred, timeout: float) -> object:  # type: ignore[no-untyped-def]
    deadline = time.time() + timeout
    while time.time() < deadline:
        if value := pred():
            return value
        time.sleep(0.5)
    raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img" / "cluster-map.png")
    ap.add_argument("--jobs", type=int, default=40)
    args = ap.parse_args()
    from playwright.sync_api import sync_playwright

    from scheduler.live.store import Store, queries

    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        store = Store.open(f"sqlite:///{home / 'corral.db'}")
        with store.session() as s:
            token = queries.create_token(s, "alice", admin=True)
        store.close()
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "RAY_ADDRESS")}
        env |= {"CORRAL_HOME": str(home), "RAY_USAGE_STATS_ENABLED": "0"}
        log = (home / "serve.log").open("wb")
        proc = subprocess.Popen([str(CORRAL), "serve", "--nodes", "4", "--gpus-per-node", "8", "--tick", "0.2",
                                 "--port", str(port)], env=env, stdout=log, stderr=log)
        base, auth = f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {token}"}
        try:
            def up() -> bool:
                if proc.poll() is not None:
                    raise SystemExit(f"corral serve exited:\n{(home / 'serve.log').read_text()[-3000:]}")
                try:
                    return requests.get(f"{base}/api/v1/health", timeout=2).ok
                except requests.ConnectionError:
                    return False

            wait("corral serve to answer", up, 180)
            ids = []
            for i in range(args.jobs):
                model = MODELS[i % len(MODELS)]
                r = requests.post(f"{base}/api/v1/jobs", headers=auth, timeout=10, json={
                    "name": f"{model.split('-')[0].lower()}-{i:02d}", "kind": "emulated", "model": model,
                    "num_gpus": SIZES[i % len(SIZES)], "duration_s": 3600 + 60 * i})
                r.raise_for_status()
                ids.append(r.json()["id"])

            def settled() -> bool:
                jobs = requests.get(f"{base}/api/v1/jobs?limit=1000", headers=auth, timeout=10).json()["jobs"]
                return all(j["state"] == "running" or j["pending_reason"] for j in jobs if j["id"] in ids)

            wait("every job placed or explained", settled, 120)
            time.sleep(2.0)
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, headless=True,
                                            args=["--no-sandbox", "--disable-gpu"])
                page = browser.new_page(viewport={"width": 1400, "height": 900})
                page.goto(f"{base}/#/signin")
                page.fill("#token", token)
                page.click("#signin-form button")
                page.wait_for_selector(".node .gpu .tenant")
                page.goto(f"{base}/#/map")
                page.wait_for_function("document.querySelectorAll('.gpu').length === 32")
                time.sleep(1.0)
                args.out.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(args.out), full_page=False)
                browser.close()
        finally:
            proc.terminate()
            proc.wait(timeout=60)
            log.close()
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
