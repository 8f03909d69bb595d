"""The documentation site builds with warnings as errors, the "writing a policy" guide's code runs as written, and every
`corral` command the docs show exists."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MKDOCS = Path(sys.executable).with_name("mkdocs")


@pytest.mark.slow  # mkdocs builds the whole site: seconds
def test_the_site_builds_strictly_with_the_api_reference(tmp_path: Path) -> None:
    if not MKDOCS.exists():
        pytest.skip(f"{MKDOCS} is missing: install the `docs` extra (make venv does)")
    env = os.environ | {"NO_MKDOCS_2_WARNING": "1"}
    out = subprocess.run([str(MKDOCS), "build", "--strict", "-d", str(tmp_path / "site")], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    # The reference is generated from the code: the Policy protocol's and the environment's own docstrings.
    policy = (tmp_path / "site" / "reference" / "policy" / "index.html").read_text()
    assert "it never mutates anything" in policy and "predict" in policy
    env_page = (tmp_path / "site" / "reference" / "env" / "index.html").read_text()
    assert "Action Space" in env_page and "action_masks" in env_page
    assert (tmp_path / "site" / "writing-a-policy" / "index.html").is_file()
    # The REST reference is rendered from the OpenAPI spec the app serves (docs/hooks/openapi.py).
    rest = (tmp_path / "site" / "reference" / "rest-api" / "index.html").read_text()
    assert "POST /api/v1/jobs" in rest and "GET /api/v1/cluster" in rest and "JobSubmit" in rest


def test_every_endpoint_says_what_it_does() -> None:
    """The REST reference's summaries come from the views' docstrings: an endpoint added without one would be a bare
    path in the docs and in Swagger UI."""
    sys.path.insert(0, str(ROOT / "docs" / "hooks"))
    try:
        from openapi import openapi_spec
    finally:
        sys.path.pop(0)
    spec = openapi_spec()
    ops = [(method.upper(), path, op) for path, methods in spec["paths"].items() for method, op in methods.items()
           if method in ("get", "post", "put", "patch", "delete")]
    assert len(ops) >= 17
    bare = [f"{m} {p}" for m, p, op in ops if not (op.get("summary") or "").strip()]
    assert not bare, f"endpoints without a summary (give the view a docstring): {bare}"


@pytest.mark.slow
def test_the_guides_example_policy_runs_in_the_simulator(tmp_path: Path) -> None:
    guide = (ROOT / "docs" / "writing-a-policy.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", guide, re.DOTALL)
    assert len(blocks) == 2
    example = blocks[0].strip().splitlines()
    assert len(example) <= 35, f"the example policy should stay short: {len(example)} lines"
    script = tmp_path / "guide.py"
    script.write_text("\n".join(blocks))
    # A subprocess: the example registers a policy, which must not leak into the other tests' registry.
    out = subprocess.run([sys.executable, str(script)], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         check=False)
    assert out.returncode == 0, out.stderr
    lines = dict(line.split(": ", 1) for line in out.stdout.strip().splitlines())
    assert set(lines) == {"smallest-quietest", "fifo"}
    assert all(v.startswith("150 jobs, average JCT ") for v in lines.values())


def test_every_page_is_in_the_navigation_and_the_readme_stays_short() -> None:
    import yaml

    nav = (ROOT / "mkdocs.yml").read_text()
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    missing = {p for p in pages if p not in nav}
    assert not missing, f"docs pages not in mkdocs.yml's nav: {sorted(missing)}"
    assert yaml.safe_load(nav.replace("!!", ""))["strict"] is True
    # The README is the front door (what Corral is, the two commands, a tour, links); reference goes in docs/.
    readme = (ROOT / "README.md").read_text().splitlines()
    assert len(readme) <= 80, f"README.md has {len(readme)} lines; move reference material into docs/"
    assert "make run" in "\n".join(readme) and "make test" in "\n".join(readme)


# ---- every `corral ...` command the docs show exists ----------------------------------------------------------------

FENCED = re.compile(r"^```[^\n]*\n(.*?)^```", re.DOTALL | re.MULTILINE)
INLINE = re.compile(r"`([^`]+)`")  # a span may wrap onto the next line
# `corral` as a command: at the start, after a space, a path (.venv/bin/corral), `$(` or `;`; then its words.
INVOCATION = re.compile(r"(?:^|(?<=[\s/(;]))corral(?=((?:[ \t]+[^\s;|&)]+)*))")
WORD = re.compile(r"[a-z][a-z0-9-]*")


def shown_commands(text: str) -> set[tuple[str, ...]]:
    """The sub-command paths of every `corral ...` in a page's code blocks and inline code: the words after `corral`
    that name a sub-command, and the first plain word that does not (a command that does not exist)."""
    import click

    from scheduler.cli.commands import main

    code = FENCED.findall(text)
    code += INLINE.findall(FENCED.sub("", text))
    found = set()
    for snippet in code:
        for line in snippet.splitlines():
            for match in INVOCATION.finditer(line):
                words = match.group(1).split()
                if words[:1] == ["corral"]:  # `docker compose exec corral corral ...`: the service, then the command
                    continue
                if words[:1] == ["import"]:  # Python's `from corral import Client`: the package, not the command
                    continue
                path: list[str] = []
                command: click.Command = main
                for word in words:
                    if not isinstance(command, click.Group) or not WORD.fullmatch(word):
                        break
                    path.append(word)
                    if word not in command.commands:
                        break  # `corral explain`: kept, so that its --help fails
                    command = command.commands[word]
                found.add(tuple(path))
    return found


def test_every_corral_command_in_the_docs_exists() -> None:
    """`corral X Y --help` succeeds for every `corral X Y ...` the README and docs/ show (in code, inline or in
    blocks), in-process: a renamed or imagined command in the docs fails here."""
    from click.testing import CliRunner

    from scheduler.cli.commands import main

    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    shown = {(page.relative_to(ROOT).as_posix(), path) for page in pages for path in shown_commands(page.read_text())}
    assert len({path for _, path in shown}) >= 25, "the docs show more commands than this: is the pattern broken?"
    runner = CliRunner()
    broken = []
    for page, path in sorted(shown):
        result = runner.invoke(main, [*path, "--help"])
        if result.exit_code != 0:
            broken.append(f"{page}: corral {' '.join(path)} ({result.output.strip()})")
    assert not broken, "the docs show commands that do not exist:\n" + "\n".join(broken)


def test_the_docs_command_finder_reads_blocks_inline_code_and_paths() -> None:
    text = ("Run `corral token create --user x` or `.venv/bin/corral team set a --quota 1`.\n\n"
            "```bash\nexport T=$(docker compose exec corral corral token list)\ncorral explain 3\n"
            "corral node start --address H:1  # a comment\n```\nThe corral command (prose) is not code.\n")
    assert shown_commands(text) == {("token", "create"), ("team", "set"), ("token", "list"), ("explain",),
                                    ("node", "start")}


# A model the docs name: `--model NAME` on a command line, `"model": "NAME"` in JSON or Python.
MODEL_NAMED = re.compile(r"""--model[ =]([A-Za-z0-9._-]+)|["']model["']\s*:\s*["']([^"']+)["']""")


def models_named(text: str) -> set[str]:
    return {a or b for a, b in MODEL_NAMED.findall(text)}


def test_every_model_the_docs_name_is_in_the_catalog() -> None:
    """A job submitted as the docs show it is not refused for its model (a 422 listing the catalog's names)."""
    from scheduler.core.generic import known_profiles

    names = set(known_profiles())  # the catalog's, and the generic profile a command job may name
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    named = {(page.relative_to(ROOT).as_posix(), m) for page in pages for m in models_named(page.read_text())}
    assert len(named) >= 5, "the docs name more models than this: is the pattern broken?"
    unknown = sorted(f"{page}: {m}" for page, m in named if m not in names)
    assert not unknown, "the docs name models the catalog does not have:\n" + "\n".join(unknown)


def test_the_model_finder_reads_options_json_and_python() -> None:
    text = ('corral submit --model BERT-large --gpus 2\ncurl -d \'{"model": "MoE", "num_gpus": 1}\'\n'
            "submit({'model': 'GPT-1.3B'})\n--model=DLRM\nThe model: prose\n")
    assert models_named(text) == {"BERT-large", "MoE", "GPT-1.3B", "DLRM"}
