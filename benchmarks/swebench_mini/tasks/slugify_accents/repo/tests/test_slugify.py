from slugs import slugify


def test_words():
    assert slugify("Hello, World!") == "hello-world"


def test_separator():
    assert slugify("a b c", separator="_") == "a_b_c"


def test_numbers():
    assert slugify("Top 10 Lists") == "top-10-lists"
