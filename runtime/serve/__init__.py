"""``wavepp serve`` and its neighbours: the HTTP API (:mod:`runtime.serve.app`), the server's runtime
(:mod:`runtime.serve.runtime`), its settings (:mod:`runtime.serve.config`), the process that runs it
(:mod:`runtime.serve.main`), the load generator (:mod:`runtime.serve.loadgen`) and the process stack
(:mod:`runtime.serve.stack`)."""
