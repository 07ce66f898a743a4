"""The host side of a collection *run* (`eval run`, or `up --benchmark/--input`), one job per module:

- `eval_run`: the flow: check, claim the run folder, serve, collect, record, report;
- `run_inputs`: every row and option checked as the collector will, then the run's inputs written;
- `run_folders`: the run folder (`<name>-<time>`), claimed once, or found again for `--resume`;
- `supervision`: the one-off collector, its progress and the stack watched while it runs;
- `progress_display`: the progress bar;
- `manifest`: what ran (`manifest.json`, the command line with secrets masked);
- `provenance`: what the manifest records for trust and reruns (models, sampling, row hashes, versions);
- `summary`: the key metrics printed at the end;
- `rerun`, `rerun_config`: `eval rerun`, a finished run again from its manifest alone;
- `compare`: `eval compare`, two runs side by side.

Vocabulary: a *run* is one collection; the *collector* (`gym_compose.collect`, inside the
project's network) collects its rollouts into the *run folder*.
"""
