import gc

# No cyclic garbage collection while the server starts: importing FastAPI, pydantic and the
# server's code ran ~125 collections, ~10% of the start, and found ~800 unreachable objects.
# web.serve() freezes what the start made (gc.freeze) and turns collection back on before serving.
gc.disable()

from gym_compose.server.entry import main  # noqa: E402

if __name__ == "__main__":
    main()
