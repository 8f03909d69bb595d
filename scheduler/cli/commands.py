"""The `corral` command: the composition root. Only here are policy names resolved through the registry, and the
upper layers (`policies`, later `agents` and `web`) imported, lazily, per sub-command.

The commands live by family: `simulate_commands` (simulate), `learning_commands` (train, calibrate, evaluate, tune),
`node_commands` (serve, ray-token, node-resources, node ...), `client_commands` (the commands that talk to a running
service) and `webhook_commands` (corral webhook ...); this module makes the group and adds them.
"""

from __future__ import annotations

import click

from scheduler.cli.client_commands import register_client_commands
from scheduler.cli.learning_commands import LEARNING_COMMANDS
from scheduler.cli.node_commands import NODE_COMMANDS
from scheduler.cli.params import CorralGroup
from scheduler.cli.simulate_commands import SIMULATE_COMMANDS
from scheduler.cli.webhook_commands import webhook


@click.group(cls=CorralGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="corral")
def main() -> None:
    """Corral: a contention-aware scheduler for shared GPU clusters."""


for command in [*SIMULATE_COMMANDS, *LEARNING_COMMANDS, *NODE_COMMANDS]:
    main.add_command(command)
register_client_commands(main)
main.add_command(webhook)


if __name__ == "__main__":
    main()
