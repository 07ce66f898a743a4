import pytest

from units import convert


def test_cm_to_m():
    assert convert("250 cm", "m") == pytest.approx(2.5)


def test_m_to_mm():
    assert convert("1.5 m", "mm") == pytest.approx(1500)


def test_not_a_length():
    with pytest.raises(ValueError):
        convert("five metres", "m")
