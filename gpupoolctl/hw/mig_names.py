"""MIG profile names as mig-parted (go-nvlib) writes them: parsed into their parts.

A name is `[<c>c.]<g>g.<gb>gb[+attr[,attr]|-attr[,attr]]`: "1g.10gb", "1c.3g.40gb" (a compute
instance of 1 slice inside a 3g.40gb GPU instance), "1g.5gb+me", "1g.24gb+me.all",
"1g.24gb-me". The parse rules follow go-nvlib's parseMigProfile, which mig-parted uses: both
'+' and '-' attributes together are refused; attributes are alphanumeric (dots inside allowed).
Here, under every floor, so that the policy file's checks and the partition planner read
names alike.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProfileName:
    ci_slices: int  # compute slices of the compute instance (== g for a full-GI CI)
    g: int
    gb: int
    attrs: tuple[str, ...] = ()
    neg_attrs: tuple[str, ...] = ()

    @property
    def gi_name(self) -> str:
        """The GPU-instance profile this names, in catalog spelling ("3g.40gb", "1g.5gb+me")."""
        suffix = ""
        if self.attrs:
            suffix = "+" + ",".join(self.attrs)
        elif self.neg_attrs:
            suffix = "-" + ",".join(self.neg_attrs)
        return f"{self.g}g.{self.gb}gb{suffix}"

    @property
    def is_ci_form(self) -> bool:
        return self.ci_slices != self.g

    def __str__(self) -> str:
        if self.is_ci_form:
            return f"{self.ci_slices}c.{self.gi_name}"
        return self.gi_name


def _field(text: str, unit: str) -> int:
    if text.strip() != text:
        raise ValueError(f"spaces around '%d{unit}'")
    if not text.endswith(unit):
        raise ValueError(f"missing '{unit}' in '%d{unit}'")
    number = text[: -len(unit)]
    if not number.isdigit() or int(number) < 1:
        raise ValueError(f"malformed number in '%d{unit}'")
    return int(number)


def _attributes(text: str) -> tuple[str, ...]:
    attrs = text.split(",")
    if len(set(attrs)) != len(attrs):
        raise ValueError("an attribute is repeated")
    for attr in attrs:
        if not attr:
            raise ValueError("empty attribute")
        if attr[0].isdigit():
            raise ValueError("attribute begins with a digit")
        if attr[0] == "." or attr[-1] == ".":
            raise ValueError("attribute begins or ends with a dot")
        if not all(ch.isascii() and (ch.isalnum() or ch == ".") for ch in attr):
            raise ValueError("attribute is not alphanumeric")
    return tuple(sorted(attrs))


def parse_profile_name(text: str) -> ProfileName:
    """Parse a MIG profile string; ValueError says what is wrong."""
    if not text:
        raise ValueError("empty profile name")
    plus = text.split("+", 1)
    minus = text.split("-", 1)
    if len(plus) == 2 and len(minus) == 2:
        raise ValueError("has both '+' and '-' attributes")
    parts = plus if len(plus) == 2 else minus
    fields = parts[0].split(".", 2)
    if len(fields) == 3:
        c, g, gb = _field(fields[0], "c"), _field(fields[1], "g"), _field(fields[2], "gb")
    elif len(fields) == 2:
        g, gb = _field(fields[0], "g"), _field(fields[1], "gb")
        c = g
    else:
        raise ValueError("expected '<g>g.<gb>gb' or '<c>c.<g>g.<gb>gb'")
    if c > g:
        raise ValueError(f"a compute instance of {c} slices cannot fit a {g}g GPU instance")
    attrs: tuple[str, ...] = ()
    neg: tuple[str, ...] = ()
    if len(parts) == 2:
        if len(plus) == 2:
            attrs = _attributes(parts[1])
        else:
            neg = _attributes(parts[1])
    return ProfileName(c, g, gb, attrs, neg)
