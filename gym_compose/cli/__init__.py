"""The command line: the typer app, its options, the lookup commands (resolve, list)."""
