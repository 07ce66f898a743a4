"""Deprecated name of `gym_compose.net.http_client` (the peers' keep-alive HTTP/1.1 client), kept
for server apps that import it. New code imports `gym_compose.net.http_client`; this name is the
same module object."""

import sys

from gym_compose.net import http_client

sys.modules[__name__] = http_client
