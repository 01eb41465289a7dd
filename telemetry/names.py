"""Span names and attribute keys: the one vocabulary code, reports and the dashboard share."""

# ---- span names (DESIGN §6) ------------------------------------------------------------------
REQUEST = "wavepp.request"                       # root: arrival -> done
ADMISSION_ROUND = "wavepp.admission.round"
HINT_LOOKUP = "wavepp.admission.hint_lookup"
LEASE = "wavepp.admission.lease"
ESCROW = "wavepp.admission.escrow"
WAVE = "wavepp.wave"                             # a wave's life, plan -> retired: parent of its stage steps
WAVE_PLAN = "wavepp.wave.plan"
MATERIALIZE = "wavepp.stage.materialize"
EXECUTE = "wavepp.stage.execute"
SEND = "wavepp.stage.send"
COMPLETE = "wavepp.stage.complete"              # a stage attaches the blocks of the requests a wave finished
STAGE_WAIT = "wavepp.stage.wait"                 # a stage blocked on capacity (baseline retry)
HTTP_REQUEST = "wavepp.http.request"             # root: a server accepted an HTTP prefill -> answered it
AUTOPILOT_DECISION = "wavepp.autopilot.decision"  # root: the autopilot's decision on one window (runtime/autopilot)

# ---- events on spans ---------------------------------------------------------------------------
EVENT_ADMITTED = "wavepp.admitted"               # on the request span, at admission time
EVENT_FALLBACK = "wavepp.fallback"               # reuse boundary lowered after the first lookup
EVENT_READMITTED = "wavepp.readmitted"           # released everywhere and sent back to admission, boundary kept
EVENT_PRODUCER_ENDED = "wavepp.producer_ended"   # a follower's producer failed or fell back: back to admission
EVENT_FAILED = "wavepp.failed"
EVENT_HALT = "wavepp.source_halt"               # the policy's source would stop the whole run here (baselines)
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
CHUNK_STARTS = "wavepp.chunk.starts"             # per chunk of a step, parallel to REQUEST_IDS
CHUNK_TOKENS = "wavepp.chunk.tokens"             # per chunk of a step, parallel to REQUEST_IDS
TOKENS = "wavepp.tokens"                         # tokens run by this step / wave
BUDGET = "wavepp.budget"                         # wave token budget the planner used
NUM_REQUESTS = "wavepp.requests"
NUM_ADMITTED = "wavepp.requests.admitted"        # requests an admission round admitted
WAITING_FOR_PRODUCER = "wavepp.requests.waiting_for_producer"  # round: requests whose next block another computes
NUM_WAVES_READY = "wavepp.waves.ready"
NUM_IN_FLIGHT = "wavepp.waves.in_flight"
EVICTIONS = "wavepp.stage.evictions"            # cached blocks a stage evicted to prepare a wave
RING = "wavepp.waves.ring"                        # waves allowed in flight when the wave was planned
REUSE_BLOCKS = "wavepp.reuse.blocks"
REUSED_TOKENS = "wavepp.reuse.tokens"            # tokens served from cache (k * B)
REUSABLE_TOKENS = "wavepp.reuse.reusable_tokens"  # tokens whose blocks a completed request computed before
FOLLOWS = "wavepp.reuse.follows"                  # a follower's producer (the request computing its prefix)
FOLLOWED_TOKENS = "wavepp.reuse.followed_tokens"  # of the reused tokens, those the producer was computing
PRODUCER = "wavepp.producer"                      # event attribute: the producer that ended
SHARED_IN_FLIGHT_TOKENS = "wavepp.reuse.in_flight_tokens"  # reused tokens a request still computing them gave
SHARED_PREFIX_TOKENS = "wavepp.reuse.shared_prefix_tokens"  # leading tokens an earlier-arrived request had too
SHARED_WITH = "wavepp.reuse.shared_with"         # the first request that arrived with that prefix (its id)
FALLBACKS = "wavepp.fallbacks"
LOOP_CPU_S = "wavepp.loop.cpu_s"                 # CPU time the loop's thread spent inside the span (pure-CPU spans)
PROBES = "wavepp.hint.probes"
BLOCKS = "wavepp.blocks"
FROM_BLOCKS = "wavepp.reuse.from_blocks"
FROM_TOKENS = "wavepp.reuse.from_tokens"         # a late fallback: the boundary before, in tokens
TO_TOKENS = "wavepp.reuse.to_tokens"             # a late fallback: the boundary after, in tokens
ERROR = "wavepp.error"
KNOBS_CHANGED = "wavepp.knobs.changed"           # names of the knobs that changed
KNOBS_VERSION = "wavepp.knobs.version"           # the knobs record's version (a refused one)
KNOBS_POOL_KEPT = "wavepp.pool.kept"              # a policy switched to runs on the run's cache pool (named)
KNOBS_TOPOLOGY_KEPT = "wavepp.topology.kept"      # ... and on the run's stages (a TEP policy's layout is not)
MEASURED = "wavepp.measured"                     # False for warm-up requests left out of the figures
GEN_AI_INPUT_TOKENS = "gen_ai.usage.input_tokens"  # OpenTelemetry GenAI semantic convention
TTFT = "gen_ai.server.time_to_first_token"        # HTTP span: accepted -> first token ready, seconds (GenAI name)
HTTP_ROUTE = "http.route"                         # HTTP span: the endpoint (OpenTelemetry HTTP convention)
HTTP_REQUEST_IDS = "wavepp.http.request_ids"      # HTTP span: the runtime's requests it made (one per prompt)
HTTP_CLIENT_ID = "http.request.header.x-request-id"  # HTTP span: the client's X-Request-ID, when it sent one
COMPUTED_TOKENS = "wavepp.tokens.computed"        # request span: prompt tokens run through the model
OUTCOME = "wavepp.request.outcome"               # request span: completed | failed
ADMISSION_LATENCY = "wavepp.admission.latency_s"  # request span: arrival -> admitted (run clock, seconds)
ADMISSION_ROUND_S = "wavepp.admission.round_s"    # request span: the admitting round's duration
ADMISSION_DEFERRALS = "wavepp.admission.deferrals"  # request span: rounds that deferred it before admission
ADMISSION_CRITICAL = "wavepp.admission.critical_path"  # round span: the loop waited for it (inline admission)

# ---- metric names (Prometheus conventions: wavepp_ prefix, unit in the name, _total for counters) --
M_ADMISSION_INTERVAL = "wavepp_admission_interval_seconds"   # between admission rounds that admitted
M_ADMISSION_LATENCY = "wavepp_admission_latency_seconds"     # arrival -> admitted
M_ADMISSION_PART = "wavepp_admission_part_seconds"           # {part=lookup|lease|escrow|round}
M_STAGE_STEP = "wavepp_stage_step_seconds"                   # {stage, step=materialize|execute|send|wait}
M_PREFILL_LATENCY = "wavepp_prefill_latency_seconds"         # arrival -> last chunk done
M_TTFT = "wavepp_time_to_first_token_seconds"                # {route}: HTTP accepted -> first token ready
M_WAVE_TOKENS = "wavepp_wave_tokens"                         # tokens of each planned wave
M_STAGE_BUSY_FRACTION = "wavepp_stage_busy_ratio"            # {stage}: execute time / sliding window
M_STAGE_BUSY = "wavepp_stage_busy_seconds"                   # {stage}: counter of execute time
M_STAGE_IDLE = "wavepp_stage_idle_seconds"                   # {stage, cause}: counter (runtime/figures/idle_causes.py)
M_REQUESTS_WAITING = "wavepp_requests_waiting"               # gauge: arrived, not admitted
M_REQUESTS_ACTIVE = "wavepp_requests_active"                 # gauge: admitted, not finished
M_WAVES_IN_FLIGHT = "wavepp_waves_in_flight"
M_WAVES_READY = "wavepp_waves_ready"                         # waves the planner had ready to plan
M_WAVE_BUDGET = "wavepp_wave_budget_tokens"
M_WAVE_RING = "wavepp_wave_ring"                             # waves allowed in flight
M_KV_BLOCKS = "wavepp_kv_blocks"                             # {stage, state=cached|free|escrowed}
M_KV_LEASES = "wavepp_kv_leases"                             # {stage}: requests holding a lease
M_INPUT_TOKENS = "wavepp_input_tokens"                       # counter: prompt tokens of completed requests
M_COMPUTED_TOKENS = "wavepp_computed_tokens"                 # counter: tokens run through stage 0
M_REUSED_TOKENS = "wavepp_reused_tokens"                     # counter: tokens served from cache
M_SHARED_IN_FLIGHT_TOKENS = "wavepp_shared_in_flight_tokens"  # counter: reused tokens a request still computing gave
M_REUSABLE_TOKENS = "wavepp_reusable_tokens"                 # counter: good-hit's denominator
M_REUSED_FROM_CACHE_TOKENS = "wavepp_reused_from_cache_tokens"  # counter: good-hit's numerator
M_REQUESTS = "wavepp_requests"                               # counter {outcome=completed|failed}
M_FALLBACKS = "wavepp_fallbacks"                             # counter: reuse boundary lowered
M_EVICTIONS = "wavepp_kv_evictions"                          # counter {stage}: cached blocks evicted
M_WAVES = "wavepp_waves"                                     # counter: waves planned
M_SPANS_DROPPED = "wavepp_spans_dropped"                     # counter {exporter}
M_STORE_FAILURES = "wavepp_store_failures"                   # counter {call, reason}: failed store attempts
M_STORE_UP = "wavepp_store_up"                               # gauge: 1 while the store takes calls, 0 in an outage
M_AUTOPILOT_DECISIONS = "wavepp_autopilot_decisions"         # counter {action}: one per window decided
M_AUTOPILOT_APPLIES = "wavepp_autopilot_applies"             # counter: knob settings the autopilot wrote
M_AUTOPILOT_ROLLBACKS = "wavepp_autopilot_rollbacks"         # counter: applies it took back
M_AUTOPILOT_PREDICTION_ERROR = "wavepp_autopilot_prediction_error"   # histogram: observed - predicted gain

# ---- the autopilot's decision span (runtime/autopilot/pilot.py) --------------------------------
AUTOPILOT_ACTION = "wavepp.autopilot.action"          # hold keep advise apply rollback drain cooldown frozen paused
AUTOPILOT_WHY = "wavepp.autopilot.why"                # the decision in words
AUTOPILOT_WINDOW = "wavepp.autopilot.window"          # JSON: the window's figures and workload statistics
AUTOPILOT_SHIFT = "wavepp.autopilot.shift"            # the statistics that moved past their thresholds
AUTOPILOT_CHOSEN = "wavepp.autopilot.chosen"          # JSON: the knob changes applied, advised or rolled back
AUTOPILOT_CANDIDATES = "wavepp.autopilot.candidates"  # JSON: the settings tried, each with its corrected gain
AUTOPILOT_PREDICTED_GAIN = "wavepp.autopilot.predicted_gain"   # relative input tok/s over the current knobs
AUTOPILOT_ERROR = "wavepp.autopilot.error"            # the replay's own measured error (relative)
AUTOPILOT_BAND = "wavepp.autopilot.noise_band"        # window-to-window throughput noise (relative)
AUTOPILOT_VERDICT = "wavepp.autopilot.verdict"        # on the last apply: kept, rolled back, inconclusive
AUTOPILOT_OBSERVED_GAIN = "wavepp.autopilot.observed_gain"     # the window after an apply against the one before
AUTOPILOT_VERSION = "wavepp.autopilot.knobs_version"  # the knob version the decision wrote
