"""WavePP: admission off the critical path (DESIGN §2)."""

from wavepp.runtime.mechanisms.admission_drive import AsyncRounds
from wavepp.runtime.mechanisms.chunking import Cost
from wavepp.runtime.mechanisms.iteration import FillToMinimum, PlansFromStore, Ring
from wavepp.runtime.mechanisms.reuse_lookup import HintIndex
from wavepp.runtime.mechanisms.sharing import FollowProducer
from wavepp.runtime.mechanisms.stage_admission import EveryStage
from wavepp.runtime.mechanisms.token_charge import SuffixOnly
from wavepp.runtime.policies.base import Policy

#: Async admission rounds beside the loop; hint index over all stages; lease + escrow on every
#: stage; a cost-aware wave budget - MPU's ladder, each candidate priced by the stages' step times and by
#: how busy the work in the system keeps them (runtime.planning.cost) - with MPU's hysteresis, charged only for
#: uncached tokens (``wavepp+chunking=mpu`` is the paper's MPU); a ring of R = 2P
#: waves in flight; a wave smaller than b_min waits for more work while P waves keep the stages busy;
#: a request whose next block another admitted request is computing follows it - reads its blocks as they are
#: computed, computes none of them, never waits for its completion (runtime.mechanisms.sharing).
WAVEPP = Policy("wavepp", admission=AsyncRounds(), lookup=HintIndex(), stage_admission=EveryStage(),
                charge=SuffixOnly(), chunking=Cost(), ring=Ring(2), fill=FillToMinimum(), relay=PlansFromStore(),
                share=FollowProducer())
