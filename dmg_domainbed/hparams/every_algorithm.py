"""The hparams this package gives every algorithm, DomainBed's and each plugin's, on every dataset.

Known to the names rule and checked by their own rules, but kept out of DomainBed's registry: a
run that gives none has exactly DomainBed's hparams, results and checkpoints.
:mod:`dmg_domainbed.precision` applies ``precision``, :mod:`dmg_domainbed.averaging` the
averaging ones and ``init_seed``. ``protocol`` changes nothing in training: a sweep file's
``protocol = "search_once"`` gives it to every job, so that the reports never pool its runs with
those of DomainBed's protocol."""

from dmg_domainbed.hparams.space import HParam, HParamSpace

PRECISION = "precision"
FP32 = "fp32"
BF16 = "bf16"
PRECISIONS = (FP32, BF16)

AVERAGING = "averaging"
AVERAGING_START = "averaging_start"
AVERAGING_DECAY = "averaging_decay"
NO_AVERAGING = "none"
SMA = "sma"
EMA = "ema"
AVERAGINGS = (NO_AVERAGING, SMA, EMA)
INIT_SEED = "init_seed"
OWN_SEED = -1  # each job's networks initialised from its own seed, as DomainBed does

PROTOCOL = "protocol"
DOMAINBED_PROTOCOL = "domainbed"  # every hparams seed x every trial
SEARCH_ONCE = "search_once"  # every hparams seed on trial 0; its winners on the other trials
PROTOCOLS = (DOMAINBED_PROTOCOL, SEARCH_ONCE)


def below_one(value: float) -> None:
    """Validator of a decay: a weight of 1 would never move the average from its start."""
    if not value < 1:
        raise ValueError("it must be below 1 (1 keeps the start's weights for good)")


# The samplers are never called by DomainBed's random search (not in its registry): each
# returns the default.
EVERY_ALGORITHM = HParamSpace(
    HParam(
        PRECISION,
        FP32,
        lambda random: FP32,
        choices=PRECISIONS,
        help="'bf16': update and predict under bf16 autocast, weights in fp32",
    ),
    HParam(
        AVERAGING,
        NO_AVERAGING,
        lambda random: NO_AVERAGING,
        choices=AVERAGINGS,
        help="weights evaluated and saved: the trained ones ('none'), their simple ('sma') or "
        "exponential ('ema') moving average",
    ),
    HParam(
        AVERAGING_START,
        100,
        lambda random: 100,
        minimum=0,
        help="step (train.py's, from 0) whose weights start the average",
    ),
    HParam(
        AVERAGING_DECAY,
        0.999,
        lambda random: 0.999,
        minimum=0.0,
        maximum=1.0,
        validate=below_one,
        help="'ema': the weight the average keeps at each step (below 1)",
    ),
    HParam(
        INIT_SEED,
        OWN_SEED,
        lambda random: OWN_SEED,
        minimum=OWN_SEED,
        help="-1: the job's own seed initialises its networks; a number: every job given it "
        "starts from the same weights, so that 'soup' can average them",
    ),
    HParam(
        PROTOCOL,
        DOMAINBED_PROTOCOL,
        lambda random: DOMAINBED_PROTOCOL,
        choices=PROTOCOLS,
        help="the sweep protocol the run belongs to (set by a sweep file's protocol; changes "
        "nothing in training): 'search_once' runs are reported apart",
    ),
)
