"""One render function per page (a page = a function of the data); each draws a :class:`dashboard.view.View`.

(Not named `pages/`: Streamlit would take that folder for its own multipage navigation.)
"""

from dashboard.screens.admission import render_admission
from dashboard.screens.cache import render_cache
from dashboard.screens.compare import render_compare
from dashboard.screens.knobs import render_knobs
from dashboard.screens.pipeline import render_pipeline
from dashboard.screens.throughput import render_throughput

PAGES = {
    "Pipeline": render_pipeline,
    "Admission": render_admission,
    "Cache": render_cache,
    "Throughput and latency": render_throughput,
    "Knobs": render_knobs,
    "Compare": render_compare,
}

__all__ = ["PAGES"]
