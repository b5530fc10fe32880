"""TLT Workbench: the Streamlit front end.

Run with `streamlit run app.py`. This file only sets the page up and routes;
each page is a `render()` function in `workbench/ui/`. To add a page, write
`workbench/ui/<name>_page.py` with a `render()` and add an `st.Page` to PAGES below.

Every page answers at its own URL (/what-if, /compare, ...). Streamlit serves its default
page at "/" only and matches no URL to it (its url_path is ""), so a default page with a
url_path of its own answers "Page not found" there. The default is therefore a hidden page
that only forwards "/" to the What-if page.
"""

from pathlib import Path

import streamlit as st

from workbench.ui import (
    calibrate_page,
    compare_page,
    paper_page,
    plan_page,
    train_page,
    tune_page,
    whatif_page,
)

# The favicon is a file served by this app (a material icon's favicon would be fetched from the
# web).
FAVICON = Path(__file__).resolve().parent / "workbench" / "ui" / "assets" / "favicon.png"
st.set_page_config(page_title="TLT Workbench", page_icon=str(FAVICON), layout="wide")

PAGES = [
    st.Page(whatif_page.render, title="What-if", icon=":material/science:", url_path="what-if"),
    st.Page(compare_page.render, title="Compare", icon=":material/compare_arrows:",
            url_path="compare"),
    st.Page(tune_page.render, title="Tune", icon=":material/tune:", url_path="tune"),
    st.Page(plan_page.render, title="Plan", icon=":material/grid_view:", url_path="plan"),
    st.Page(calibrate_page.render, title="Calibrate", icon=":material/straighten:",
            url_path="calibrate"),
    st.Page(train_page.render, title="Train (real)", icon=":material/model_training:",
            url_path="train"),
    st.Page(paper_page.render, title="TLT paper", icon=":material/article:", url_path="paper"),
]


def _home() -> None:
    st.switch_page(PAGES[0])


HOME = st.Page(_home, title="Home", url_path="home", default=True, visibility="hidden")

with st.sidebar:
    st.markdown("### TLT Workbench")
    st.caption("Long-tail RL rollouts with adaptive speculative "
               "decoding: simulate, compare, tune, train.")

st.navigation([HOME, *PAGES], position="sidebar").run()
