"""Preloaded last by the fork server of warm jobs (:mod:`.local_parallel`), imported nowhere
else: waits until the threads the other preloads started have ended (wilds checks for a newer
version in one), so that no job is forked while another thread holds a lock, e.g. an import's
(daemon threads, tqdm's monitor, sleep and are left alone); records whether those imports
initialised CUDA (``cuda_initialised``), which a forked child cannot tell itself."""

import sys
import threading
import time

_deadline = time.monotonic() + 10.0
for _thread in threading.enumerate():
    if _thread is not threading.current_thread() and not _thread.daemon:
        _thread.join(max(0.0, _deadline - time.monotonic()))

_torch = sys.modules.get("torch")
cuda_initialised = _torch is not None and _torch.cuda.is_initialized()
