import pytest

from units import convert


def test_km_to_m():
    assert convert("5 km", "m") == pytest.approx(5000)


def test_m_to_km():
    assert convert("250 m", "km") == pytest.approx(0.25)


def test_unknown_unit_in_text():
    with pytest.raises(ValueError):
        convert("3 miles", "m")
