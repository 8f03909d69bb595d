"""The `corral` command: the composition root. Only here are policy names resolved through the registry, and the
upper layers (`policies`, later `agents` and `web`) imported, lazily, per sub-command.

The commands live by family: `simulate_commands` (simulate), `learning_commands` (train, calibrate, evaluate, tune),
`node_commands` (serve, ray-token, node-resources, node ...); those that talk to a running service:
`submit_commands` (submit, resubmit), `job_commands` (jobs, show, cancel, logs), `job_control_commands` (hold,
release, requeue, update, time-limits), `array_commands` (array ...), `whatif_commands` (whatif), `cluster_commands`
(cluster, models, policy), `team_commands` (team ..., user ..., limits), `priority_class_commands` (priority-class
...) and `webhook_commands` (webhook ...); and `token_commands` (token ..., which opens the store itself). This module
makes the group and adds them.
"""

from __future__ import annotations

import click

from scheduler.cli.accounting_commands import ACCOUNTING_COMMANDS
from scheduler.cli.array_commands import ARRAY_COMMANDS
from scheduler.cli.cluster_commands import CLUSTER_COMMANDS
from scheduler.cli.job_commands import JOB_COMMANDS
from scheduler.cli.job_control_commands import JOB_CONTROL_COMMANDS
from scheduler.cli.learning_commands import LEARNING_COMMANDS
from scheduler.cli.node_commands import NODE_COMMANDS
from scheduler.cli.params import CorralGroup
from scheduler.cli.priority_class_commands import PRIORITY_CLASS_COMMANDS
from scheduler.cli.simulate_commands import SIMULATE_COMMANDS
from scheduler.cli.submit_commands import SUBMIT_COMMANDS
from scheduler.cli.team_commands import TEAM_COMMANDS
from scheduler.cli.token_commands import TOKEN_COMMANDS
from scheduler.cli.webhook_commands import webhook
from scheduler.cli.whatif_commands import WHATIF_COMMANDS


@click.group(cls=CorralGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="corral")
def main() -> None:
    """Corral: a contention-aware scheduler for shared GPU clusters."""


for command in [*SIMULATE_COMMANDS, *LEARNING_COMMANDS, *NODE_COMMANDS, *SUBMIT_COMMANDS, *JOB_COMMANDS,
                *JOB_CONTROL_COMMANDS, *ARRAY_COMMANDS, *WHATIF_COMMANDS, *CLUSTER_COMMANDS, *TEAM_COMMANDS,
                *PRIORITY_CLASS_COMMANDS, *TOKEN_COMMANDS, *ACCOUNTING_COMMANDS, webhook]:
    main.add_command(command)


if __name__ == "__main__":
    main()
