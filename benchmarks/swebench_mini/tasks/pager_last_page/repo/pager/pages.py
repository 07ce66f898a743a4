"""Pages of a sequence: page numbers start at 1."""


def page_count(total: int, per_page: int) -> int:
    """How many pages `total` items fill, `per_page` to a page."""
    if per_page < 1:
        raise ValueError("per_page must be at least 1")
    return total // per_page


def page(items: list, number: int, per_page: int) -> list:
    """The items on page `number` (1-based)."""
    if number < 1 or number > max(page_count(len(items), per_page), 1):
        raise IndexError(f"no page {number}")
    start = (number - 1) * per_page
    return items[start:start + per_page]
