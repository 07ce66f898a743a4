"""The runtime inside every gym-compose container: `python -m gym_compose.server`.

Kept import-light: the healthcheck imports this package and must start fast.
"""
