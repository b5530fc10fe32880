"""Streamlit pages; app.py puts them together."""
