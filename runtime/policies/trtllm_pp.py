"""A TensorRT-LLM-style pipeline loop (PyExecutor ``_executor_loop_pp``), on our cache and engine.

Sources (NVIDIA/TensorRT-LLM, ``tensorrt_llm/_torch/pyexecutor/``):

* admission inside the loop: every iteration fetches new requests and schedules them on the
  first PP rank before the micro-batch runs (``_executor_loop_pp``);
* new requests, with their ``input_token_ids``, are pickled and relayed down the PP chain
  (``request_utils.RequestBroadcaster._broadcast_requests``); cost per token: PR #15134
  measured pickle + unpickle of a ~40k-token request at 0.06 ms (the optimised figure);
* no cross-stage reuse agreement: each rank's ``KVCacheManager.prepare_resources`` calls
  ``add_sequence`` on the request's first context chunk and matches its prefix alone;
  a rank that cannot fit the schedule waits for capacity (``_pp_retry_until_can_schedule``,
  "may cause bubbles") - here a stage lacking part of stage 0's prefix falls back late to
  the lowest common boundary (DESIGN §3), and the request is re-admitted;
* ``num_micro_batches = pp_size``: P micro-batches in flight;
* static context chunks of ``max_num_tokens`` (default 8192), FCFS (``_chunk_fcfs``).

Several chunks of one prompt may be in flight at once (PR #9308), as in WavePP.
"""

from runtime.policies.base import StaticChunkPolicy


class TrtllmPP(StaticChunkPolicy):
    """Differs from ``wavepp`` in: admission inside the loop; stage-0-only reuse lookup and
    allocation with stage-local admission (and late fallback) on the other stages; request
    broadcast down the chain; R = P; static chunks of ``static_chunk_tokens``, scheduled every
    iteration with whatever is there (no wait to fill a wave)."""

    name = "trtllm-pp"
    async_admission = False
    use_hint_index = False
    lease_all_stages = False
    broadcast_requests = True
    ring_factor = 1
    fill_waves = False
