from slugs.slugify import slugify

__all__ = ["slugify"]
