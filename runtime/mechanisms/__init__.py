"""Mechanisms: the parts a policy is composed of, one kind per module, each plugged into one
fixed hook point of the pipeline loop.

======================  ===========================================  =================================
kind (module)           hook point                                   variants
======================  ===========================================  =================================
``admission_drive``     who runs admission rounds, and when          ``AsyncRounds`` | ``InlineRounds``
``reuse_lookup``        where a round finds the reuse boundary       ``HintIndex`` | ``FirstStageTree``
``stage_admission``     which stages lease + escrow at admission,    ``EveryStage`` | ``OnFirstChunk``
                        and what the others do before a chunk
``token_charge``        what a chunk costs against a wave's budget   ``SuffixOnly`` | ``FromPositionZero``
``reserve``             KV blocks escrowed per admitted request      ``SuffixBlocks`` | ``WholePrompt``
``chunking``            the wave budget and how chunks fill it       ``Mpu`` | ``Static``
``iteration``           waves in flight, waiting to fill, the        ``Ring``, ``FillWaves``,
                        request relay, how a ring slot reopens       ``RequestRelay``, ``ReturnPath``
``host_work``           per-wave host work on every stage            ``Overlapped`` | ``Lockstep``
======================  ===========================================  =================================

The loop calls the hooks and never asks which variant it holds; a policy
(:mod:`runtime.policies`) is a frozen composition of one variant per kind, with the sources of
each. Every variant's docstring says what it models and where that comes from.
"""
