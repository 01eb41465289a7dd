"""WavePP: admission off the critical path (DESIGN §2)."""

from runtime.mechanisms.admission_drive import AsyncRounds
from runtime.mechanisms.chunking import Mpu
from runtime.mechanisms.iteration import FillWaves, RequestRelay, Ring
from runtime.mechanisms.reuse_lookup import HintIndex
from runtime.mechanisms.stage_admission import EveryStage
from runtime.mechanisms.token_charge import SuffixOnly
from runtime.policies.base import Policy

#: Async admission rounds beside the loop; hint index over all stages; lease + escrow on every
#: stage; MPU wave budget with hysteresis (charged only for uncached tokens); a ring of R = 2P
#: waves in flight; a wave smaller than b_min waits for more work while P waves keep the stages busy.
WAVEPP = Policy("wavepp", admission=AsyncRounds(), lookup=HintIndex(), stage_admission=EveryStage(),
                charge=SuffixOnly(), chunking=Mpu(), ring=Ring(2), fill=FillWaves(True), relay=RequestRelay(False))
