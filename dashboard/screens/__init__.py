"""One render function per page (a page = a function of the data); each draws a :class:`dashboard.view.View`.

(Not named `pages/`: Streamlit would take that folder for its own multipage navigation.)
"""

from wavepp.dashboard.screens.admission import render_admission
from wavepp.dashboard.screens.autopilot import render_autopilot
from wavepp.dashboard.screens.cache import render_cache
from wavepp.dashboard.screens.compare import render_compare
from wavepp.dashboard.screens.knobs import render_knobs
from wavepp.dashboard.screens.pipeline import render_pipeline
from wavepp.dashboard.screens.throughput import render_throughput

PAGES = {
    "Pipeline": render_pipeline,
    "Admission": render_admission,
    "Cache": render_cache,
    "Throughput and latency": render_throughput,
    "Knobs": render_knobs,
    "Autopilot": render_autopilot,
    "Compare": render_compare,
}

__all__ = ["PAGES"]
