"""HTTP for peers inside the containers: the keep-alive client and the Starlette helpers (in the base image)."""
