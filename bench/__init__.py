"""Benchmarks of gym-compose: each is a module run from the repository root as `python -m bench.NAME`
(docs/development.md lists them). Their shared code is bench/_support/."""
