"""The operator dashboard: Streamlit + Plotly over the runtime's spans, knobs and status."""
