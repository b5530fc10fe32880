"""TLT Workbench: the Streamlit front end.

Run with `streamlit run app.py`. This file only sets the page up and routes;
each page is a `render()` function in `workbench/ui/`. To add a page, write
`workbench/ui/<page>.py` with a `render()` and add an `st.Page` to PAGES below.
"""

import streamlit as st

from workbench.ui import compare_page, paper_page, train_page, tune_page, whatif

st.set_page_config(page_title="TLT Workbench", page_icon=":material/speed:", layout="wide")

PAGES = [
    st.Page(whatif.render, title="What-if", icon=":material/science:", url_path="what-if", default=True),
    st.Page(compare_page.render, title="Compare", icon=":material/compare_arrows:", url_path="compare"),
    st.Page(tune_page.render, title="Tune", icon=":material/tune:", url_path="tune"),
    st.Page(train_page.render, title="Train (real)", icon=":material/model_training:", url_path="train"),
    st.Page(paper_page.render, title="TLT paper", icon=":material/article:", url_path="paper"),
]

with st.sidebar:
    st.markdown("### TLT Workbench")
    st.caption("Long-tail RL rollouts with adaptive speculative decoding: simulate, compare, tune, train.")

st.navigation(PAGES, position="sidebar").run()
