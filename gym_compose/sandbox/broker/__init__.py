"""The sandbox broker: the one service of a project that talks to the Docker Engine API.

It runs no model-written code and listens only on the project's sandbox control network. Servers
that declared sandboxes lease them here (authenticated by a token derived from the project's
secret); the broker creates only what the plan's `SandboxPolicy` allows, keeps warm pools, throttles
starts, caps live sandboxes, reaps idle ones and removes everything it made when it stops.
"""
