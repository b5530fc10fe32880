"""Why each speedup, as What-if and Compare show it: the decomposition's table (one precision per
figure, '-' where a figure does not apply) and one sentence per policy."""

from __future__ import annotations

from typing import Sequence

import pandas as pd
import streamlit as st

from workbench.contracts.speedup import WHY_HEADERS, SpeedupWhy, why_table


def show_whys(whys: Sequence[SpeedupWhy], key: str, caption: str) -> None:
    """The "Why this speedup" section for `whys` (none: nothing shown)."""
    if not whys:
        return
    st.subheader("Why this speedup")
    shown = pd.DataFrame(why_table(whys), columns=list(WHY_HEADERS.values())).set_index("policy")
    st.dataframe(shown, width="stretch", key=key)
    for w in whys:
        st.markdown(f"- {w.sentence}")
    st.caption(caption)
