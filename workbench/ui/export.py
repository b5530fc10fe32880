"""Downloads the pages share: a figure as PNG or SVG, a result as one self-contained HTML report,
and a policy exported for vLLM, SGLang / FastRL and veRL (`policy_export_buttons`).

Plotly figures become images through kaleido, which drives a Chrome (Debian's chromium here, the
one the browser tests use). Starting it takes seconds, so nothing is drawn until a button is
clicked (Streamlit calls the download's data function then), and one kaleido server is kept for
the process: later images take well under a second. Where kaleido or a Chrome is missing the
buttons are replaced by a note; the HTML report needs neither (its figures carry PNG and SVG
buttons of their own, drawn by the browser that opens it).
"""

from __future__ import annotations

import base64
import html
import importlib.util
import io
import os
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Union

import pandas as pd
import plotly.graph_objects as go
import streamlit as st
from matplotlib.figure import Figure

from workbench.contracts.policy import DrafterKind, Policy
from workbench.deploy.export import TARGETS, ExportError, export_policy

CHROME_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
MIME = {"png": "image/png", "svg": "image/svg+xml", "html": "text/html"}
_LOCK = threading.Lock()  # one kaleido server per process, started by the first image asked for
_SERVER = {"started": False}


def image_export_problem() -> str | None:
    """Why plotly figures cannot be exported here, or None when they can."""
    if importlib.util.find_spec("kaleido") is None:
        return "PNG/SVG export needs the kaleido package (pip install 'kaleido>=1')"
    if not os.environ.get("BROWSER_PATH") and not any(shutil.which(n) for n in CHROME_NAMES):
        return "PNG/SVG export needs a Chrome or Chromium (Debian: apt-get install chromium)"
    return None


def plotly_image(fig: go.Figure, fmt: str, scale: float = 2.0) -> bytes:
    """The figure as PNG or SVG bytes (kaleido;
    RuntimeError where image_export_problem() says why)."""
    problem = image_export_problem()
    if problem:
        raise RuntimeError(problem)
    import kaleido  # noqa: PLC0415 - optional: only needed when an image is asked for

    with _LOCK:
        if not _SERVER["started"]:
            kaleido.start_sync_server(silence_warnings=True)
            _SERVER["started"] = True
        return fig.to_image(format=fmt, scale=scale if fmt == "png" else 1.0)


def matplotlib_image(fig: Figure, fmt: str, dpi: int = 120) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=dpi)
    return buf.getvalue()


def figure_downloads(fig: Union[go.Figure, Figure], name: str, key: str) -> None:
    """Two small buttons under a figure: PNG and SVG, drawn when clicked."""
    is_plotly = isinstance(fig, go.Figure)
    problem = image_export_problem() if is_plotly else None
    if problem:
        st.caption(f"{problem}; the chart's camera button saves a "
                   "PNG, and the HTML report keeps every figure.")
        return
    cols = st.columns([1, 1, 8])
    for col, fmt in zip(cols, ("png", "svg")):
        def data(fmt=fmt) -> bytes:
            return plotly_image(fig, fmt) if is_plotly else matplotlib_image(fig, fmt)

        col.download_button(fmt.upper(), data, file_name=f"{name}.{fmt}", mime=MIME[fmt],
                            key=f"{key}:{fmt}", type="tertiary", icon=":material/download:",
                            on_click="ignore", help=f"Download this figure as {fmt.upper()}.")


# ---------------------------------------------------------------- the HTML report


@dataclass
class Report:
    """A result as a document: a title, lines of context,
    then sections of text, tables and figures."""

    title: str
    context: list[str] = field(default_factory=list)  # short lines under the title (plain text)
    # ("h2" | "p" | "table" | "figure", value)
    parts: list[tuple[str, object]] = field(default_factory=list)

    def heading(self, text: str) -> "Report":
        self.parts.append(("h2", text))
        return self

    def text(self, text: str) -> "Report":
        self.parts.append(("p", text))
        return self

    def table(self, df: pd.DataFrame,
              formats: dict[str, Callable[[float], str]] | None = None) -> "Report":
        self.parts.append(("table", (df, formats or {})))
        return self

    def figure(self, fig: Union[go.Figure, Figure], name: str) -> "Report":
        self.parts.append(("figure", (fig, name)))
        return self


_STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; \
max-width: 1200px;
       color: #222; padding: 0 1rem; }
h1 { margin-bottom: .2rem; } .context { color: #555; margin: .1rem 0; }
table { border-collapse: collapse; margin: .5rem 0 1rem; font-size: .9rem; }
th, td { border: 1px solid #ddd; padding: .3rem .6rem; text-align: right; }
th { background: #f4f4f4; } td:first-child, th:first-child { text-align: left; }
.figure { margin: 1rem 0 2rem; } .figure button { margin-right: .4rem; }
footer { color: #777; font-size: .8rem; margin-top: 3rem; }
"""


def _table_html(df: pd.DataFrame, formats: dict[str, Callable[[float], str]]) -> str:
    named = [n for n in df.index.names if n is not None]
    shown = df.reset_index() if named else df.copy()  # the index as columns: one header row
    for col, fmt in formats.items():
        if col in shown.columns:
            shown[col] = [fmt(v) for v in shown[col]]
    return shown.to_html(border=0, escape=True, na_rep="-", index=False)


def _figure_html(fig: Union[go.Figure, Figure], name: str, index: int, first_plotly: bool) -> str:
    if isinstance(fig, go.Figure):
        div = f"fig{index}"
        # The app's charts use thin margins (Streamlit pads
        # them); alone on a page they need room for the axes.
        wide = go.Figure(fig).update_layout(margin={"l": 70, "r": 30, "t": 70, "b": 60})
        body = wide.to_html(full_html=False, include_plotlyjs=first_plotly, div_id=div,
                            config={"displaylogo": False})
        buttons = "".join(
            f'<button onclick="Plotly.downloadImage(\'{div}\', '
            f'{{format: \'{fmt}\', filename: \'{html.escape(name)}\', '
            'scale: '
            f'{2 if fmt == "png" else 1}}})">{fmt.upper()}</button>' for fmt in ("png", "svg"))
        return f'<div class="figure">{body}<div>{buttons}</div></div>'
    svg = matplotlib_image(fig, "svg").decode("utf-8")
    svg_start = svg.find("<svg")  # drop the XML prolog and doctype: the SVG goes inline
    png = base64.b64encode(matplotlib_image(fig, "png")).decode("ascii")
    href_svg = "data:image/svg+xml;base64," + base64.b64encode(svg.encode("utf-8")).decode("ascii")
    links = (f'<a download="{html.escape(name)}.png" href="data:image/png;base64,{png}">PNG</a> · '
             f'<a download="{html.escape(name)}.svg" href="{href_svg}">SVG</a>')
    return f'<div class="figure">{svg[svg_start:]}<div>{links}</div></div>'


def report_html(report: Report) -> str:
    """One HTML file, everything inline (plotly.js included once): it opens offline, anywhere."""
    out = ["<!DOCTYPE html>\n<html lang='en'><head><meta "
           f"charset='utf-8'><title>{html.escape(report.title)}</title>",
           f"<style>{_STYLE}</style></head><body>", f"<h1>{html.escape(report.title)}</h1>"]
    out += [f'<p class="context">{html.escape(line)}</p>' for line in report.context]
    plotly_seen = False
    for i, (kind, value) in enumerate(report.parts):
        if kind == "h2":
            out.append(f"<h2>{html.escape(str(value))}</h2>")
        elif kind == "p":
            out.append(f"<p>{html.escape(str(value))}</p>")
        elif kind == "table":
            df, formats = value
            out.append(_table_html(df, formats))
        else:
            fig, name = value
            out.append(_figure_html(fig, name, i,
                                    first_plotly=not plotly_seen and isinstance(fig, go.Figure)))
            plotly_seen = plotly_seen or isinstance(fig, go.Figure)
    out.append("<footer>TLT Workbench · "
               f"{time.strftime('%Y-%m-%d %H:%M')}</footer></body></html>\n")
    return "\n".join(out)


def pct(v: float) -> str:
    return f"{v:.1%}"


def fixed(digits: int) -> Callable[[float], str]:
    return lambda v: f"{v:,.{digits}f}"


def times(v: float) -> str:
    return f"{v:.2f}x"


def report_button(label: str, build: Callable[[], Report], file_name: str, key: str) -> None:
    """A download of the report, built when clicked (a report carries plotly.js: ~5 MB)."""
    st.download_button(label, lambda: report_html(build()), file_name=file_name, mime=MIME["html"],
                       key=key, icon=":material/description:", on_click="ignore",
                       help="One HTML file with the inputs, the tables and the interactive "
                            "figures; it opens offline in any browser, so it can be sent as it is.")


# The shipped EAGLE drafter (of traces/reference/model), found from this file: the app may start
# anywhere.
DEFAULT_DRAFTER = str(Path(__file__).resolve().parents[2] / "traces" / "reference" / "drafter")
TARGET_LABELS = {"vllm": "vLLM", "sglang": "SGLang / FastRL", "verl": "veRL"}
TARGET_MIME = {"yaml": "application/x-yaml", "sh": "text/x-shellscript"}


def policy_export_buttons(policy: Policy, key: str, first: str | None = None) -> None:
    """One download per target: the policy as `tlt export --to TARGET` writes it
    (workbench/deploy/export.py).
    A target that cannot run the policy says why instead; what a file approximates or drops is
    listed in the file and under the buttons. `first`: the stack the policy was tuned for (its
    button first and primary)."""
    st.markdown(f"**Export {policy.name} for a real stack** (as `tlt "
                f"export {policy.name}.yaml --to ...` writes it)")
    drafter = ""
    if policy.drafter.kind == DrafterKind.EAGLE:
        drafter = st.text_input("EAGLE or EAGLE-3 drafter: a checkpoint directory or a Hugging "
                                "Face hub id (written into the files)",
                                key=f"{key}_drafter",
                                value=DEFAULT_DRAFTER if os.path.isdir(DEFAULT_DRAFTER) else "")
    targets = sorted(TARGETS, key=lambda t: t != first)
    cols = st.columns(len(targets))
    notes: list[str] = []
    for col, target in zip(cols, targets):
        label = TARGET_LABELS[target]
        try:
            exp = export_policy(policy, target, drafter.strip() or None)
        except ExportError as exc:
            col.caption(f"{label}: not exported. {exc}")
            continue
        col.download_button(f"Download for {label}", exp.text, file_name=exp.file_name,
                            mime=TARGET_MIME[exp.suffix], key=f"{key}_{target}", on_click="ignore",
                            icon=":material/rocket_launch:",
                            type="primary" if target == first else "secondary")
        notes += [f"{label}: {n}" for n in exp.notes]
    if notes:
        with st.expander(f"What the targets cannot express ({len(notes)} notes)"):
            st.markdown("\n".join(f"- {n}" for n in notes))
