"""TLT Workbench: the Streamlit front end.

Run with `streamlit run app.py`. This file only sets the page up and routes;
each page is a `render()` function in `workbench/ui/`. To add a page (Compare,
Tune, ...), write `workbench/ui/<page>.py` with a `render()` and add an
`st.Page` to PAGES below; the sidebar menu appears once there are two pages.
"""

import streamlit as st

from workbench.ui import whatif

st.set_page_config(page_title="TLT Workbench", page_icon=":material/speed:", layout="wide")

PAGES = [
    st.Page(whatif.render, title="What-if", icon=":material/science:", url_path="what-if", default=True),
]

with st.sidebar:
    st.markdown("### TLT Workbench")
    st.caption("Long-tail RL rollouts with adaptive speculative decoding: simulate, compare, tune.")

st.navigation(PAGES, position="sidebar").run()
