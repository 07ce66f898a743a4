from slugs import slugify


def test_accents_are_dropped():
    assert slugify("Crème Brûlée") == "creme-brulee"


def test_accented_word_stays_whole():
    assert slugify("Café au lait") == "cafe-au-lait"
