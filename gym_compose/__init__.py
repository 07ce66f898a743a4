"""gym-compose: NeMo Gym-style RL environments, one Docker container per server."""

__version__ = "0.1.0"
