"""Deprecated name of `gym_compose.net.web` (the Starlette helpers), kept for server apps that
import it (`server_images/*/app.py`, code written against NeMo Gym's compatibility layer).
New code imports `gym_compose.net.web`; this name is the same module object."""

import sys

from gym_compose.net import web

sys.modules[__name__] = web
