"""Imported by the fork server of warm jobs (:mod:`.local_parallel`) after the modules it
preloads, and nowhere else: waits until the threads those imports started have ended (wilds
checks for a newer version in one), so that no job is forked while another thread may hold a
lock, e.g. an import's, that the job would then wait for forever. Daemon threads (tqdm's
monitor) sleep and are left alone.

It also records whether those imports initialised CUDA (``cuda_initialised``): a forked job
reads it, as ``torch.cuda.is_initialized()`` reads False in a child forked after CUDA started."""

import sys
import threading
import time

_deadline = time.monotonic() + 10.0
for _thread in threading.enumerate():
    if _thread is not threading.current_thread() and not _thread.daemon:
        _thread.join(max(0.0, _deadline - time.monotonic()))

_torch = sys.modules.get("torch")
cuda_initialised = _torch is not None and _torch.cuda.is_initialized()
