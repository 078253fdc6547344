"""Small Arrow helpers of quixsinks.core.arrow."""

from __future__ import annotations

import pytest

from quixsinks.core.arrow import returned_bytes
from quixsinks.core.errors import RecordError


def test_returned_bytes_encodes_text_and_names_a_wrong_type() -> None:
    assert returned_bytes(["ü", b"\xff"], sink="s", option="o").to_pylist() == [
        "ü".encode(),
        b"\xff",
    ]
    assert returned_bytes([None], sink="s", option="o", nulls=True).to_pylist() == [None]
    with pytest.raises(RecordError, match=r"^s: 'o' returned int for row 12; it must return"):
        returned_bytes([b"a", 5], sink="s", option="o", first_row=11)
    with pytest.raises(RecordError, match="returned NoneType for row 0"):
        returned_bytes([None], sink="s", option="o")
