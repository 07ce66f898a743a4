from tinystats.summary import mean, spread, summarize

__all__ = ["mean", "spread", "summarize"]
