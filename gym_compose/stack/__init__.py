"""The stack commands behind the CLI (render, build, up, down, ps, logs), one module per job:

- `lifecycle`: resolve -> plan -> build -> render -> start and wait; down; the reaper;
- `teardown`: stop with a grace period and remove, however the command ends;
- `log_following`: `logs`, and `up` attached (follow the logs, stop when a server dies);
- `table`: the service table `ps` and `up` print;
- `state`: where the rendered project of each running stack lives.

Each command is resolve -> plan -> (build) -> render -> engine, in that order; nothing touches
Docker before the config has loaded and the stack has planned without error.
"""
