"""Kubernetes resource quantities ("500m", "1.5Gi", "2e3", "128M") as exact decimals."""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_SUFFIX = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
_FORM = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$")


class QuantityError(ValueError):
    pass


def parse_quantity(value: object) -> Decimal:
    """Parse a quantity as the API server would; numbers (from YAML) are accepted too."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int | float):
        return Decimal(str(value))
    if not isinstance(value, str):
        raise QuantityError(f"{value!r} is not a quantity")
    match = _FORM.match(value.strip())
    if not match:
        raise QuantityError(f'"{value}" is not a quantity (examples: "500m", "2", "1Gi", "1e3")')
    number, exponent, suffix = match.groups()
    try:
        amount = Decimal(number + (exponent or ""))
    except InvalidOperation as err:  # pragma: no cover - the regex admits only valid numbers
        raise QuantityError(f'"{value}" is not a quantity') from err
    return amount * _SUFFIX[suffix or ""]
