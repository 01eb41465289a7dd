"""Span names and attribute keys: the one vocabulary code, reports and the dashboard share."""

# ---- span names (DESIGN §6) ------------------------------------------------------------------
REQUEST = "wavepp.request"                       # root: arrival -> done
ADMISSION_ROUND = "wavepp.admission.round"
HINT_LOOKUP = "wavepp.admission.hint_lookup"
LEASE = "wavepp.admission.lease"
ESCROW = "wavepp.admission.escrow"
WAVE_PLAN = "wavepp.wave.plan"
MATERIALIZE = "wavepp.stage.materialize"
EXECUTE = "wavepp.stage.execute"
SEND = "wavepp.stage.send"
COMPLETE = "wavepp.stage.complete"
STAGE_WAIT = "wavepp.stage.wait"                 # a stage blocked on capacity (baseline retry)

# ---- events on spans ---------------------------------------------------------------------------
EVENT_ADMITTED = "wavepp.admitted"               # on the request span, at admission time
EVENT_FALLBACK = "wavepp.fallback"               # reuse boundary lowered after the first lookup
EVENT_FAILED = "wavepp.failed"
EVENT_KNOBS = "wavepp.knobs.changed"             # on the plan span of the first wave under new knobs
EVENT_KNOBS_REFUSED = "wavepp.knobs.refused"     # on the next plan span after the runtime refused a record

# ---- attribute keys ----------------------------------------------------------------------------
POLICY = "wavepp.policy"
RUN_ID = "wavepp.run.id"                         # resource attribute: the run's unique id (every span)
RUN_LABEL = "wavepp.run.label"                   # resource attribute: the run's human label
ENGINE = "wavepp.engine"
REQUEST_ID = "wavepp.request.id"
REQUEST_IDS = "wavepp.request.ids"
STAGE = "wavepp.stage"
WAVE_ID = "wavepp.wave.id"
CHUNK_START = "wavepp.chunk.start"
TOKENS = "wavepp.tokens"                         # tokens run by this step / wave
BUDGET = "wavepp.budget"                         # wave token budget the planner used
NUM_REQUESTS = "wavepp.requests"
NUM_ADMITTED = "wavepp.requests.admitted"        # requests an admission round admitted
NUM_WAVES_READY = "wavepp.waves.ready"
NUM_IN_FLIGHT = "wavepp.waves.in_flight"
EVICTIONS = "wavepp.stage.evictions"            # cached blocks a stage evicted to prepare a wave
RING = "wavepp.waves.ring"                        # waves allowed in flight when the wave was planned
REUSE_BLOCKS = "wavepp.reuse.blocks"
REUSED_TOKENS = "wavepp.reuse.tokens"            # tokens served from cache (k * B)
REUSABLE_TOKENS = "wavepp.reuse.reusable_tokens"  # tokens whose blocks a completed request computed before
FALLBACKS = "wavepp.fallbacks"
PROBES = "wavepp.hint.probes"
BLOCKS = "wavepp.blocks"
FROM_BLOCKS = "wavepp.reuse.from_blocks"
ERROR = "wavepp.error"
KNOBS_CHANGED = "wavepp.knobs.changed"           # names of the knobs that changed
KNOBS_VERSION = "wavepp.knobs.version"           # the knobs record's version (a refused one)
MEASURED = "wavepp.measured"                     # False for warm-up requests left out of the figures
GEN_AI_INPUT_TOKENS = "gen_ai.usage.input_tokens"  # OpenTelemetry GenAI semantic convention
