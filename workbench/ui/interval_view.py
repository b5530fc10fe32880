"""How sure a page's figures are: each policy's step time and speedup with its 90% interval, and
what the interval covers (workbench/compare/intervals.py), as What-if and Compare show it and as
`tlt sim` and `tlt compare` print it; or why there is none."""

from __future__ import annotations

import streamlit as st

from workbench.compare.intervals import PolicyInterval, interval_lines


def show(intervals: list[PolicyInterval] | None, reference: str) -> None:
    lines = interval_lines(intervals, reference)
    if not intervals:
        st.caption(lines[0].capitalize() + ".")
        return
    st.markdown(f"**How sure:** {intervals[0].covers}.")
    st.code("\n".join(x.strip() for x in lines[1:]), language=None, wrap_lines=True)


def tile_delta(intervals: list[PolicyInterval] | None, policy: str,
               which: str = "speedup") -> dict:
    """A metric tile's interval under its value (grey, no arrow), for `st.metric(**...)`; nothing
    without one."""
    pi = next((p for p in intervals or [] if p.policy == policy), None)
    if pi is None:
        return {}
    iv = pi.speedup if which == "speedup" else pi.step_s
    text = (f"{iv.level:.0%}: {iv.low:.2f}-{iv.high:.2f}x" if which == "speedup"
            else f"{iv.level:.0%}: {iv.low:,.1f}-{iv.high:,.1f} s")
    return {"delta": text, "delta_color": "off", "delta_arrow": "off"}
