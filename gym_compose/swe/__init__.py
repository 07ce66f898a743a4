"""SWE tasks on the host: task repositories made into git repositories and sandbox images, and the
checks a SWE benchmark needs before anything starts (rows prepared, images reachable).

The verifier and the coding agent that use them run in containers: gym_compose.server.swe and
gym_compose.server.agents.coding_agent. Reference: docs/swe.md.
"""
