from units.convert import convert

__all__ = ["convert"]
