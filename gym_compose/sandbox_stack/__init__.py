"""The host side of sandboxes: what a config declares (declaration), how the stack gets a broker,
networks and secrets for them (plan, render), and the CLI's view of live sandboxes (commands).
The runtime inside the containers is gym_compose.sandbox."""
