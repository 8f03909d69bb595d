"""The `corral` command (`commands`, the composition root of the offline tools) and the HTTP client commands that
talk to a running service (`client`, `client_io` and the `*_commands` families)."""
