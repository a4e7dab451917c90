"""A job for the warm-start test. Imported, it starts a thread that creates the file named by
``THREAD_MARKER`` a second later, as wilds' version check runs in a thread started at its
import; run, it exits 0 if that file exists (the thread had ended before the job was forked)."""

import os
import sys
import threading
import time


def _finish() -> None:
    time.sleep(1)
    open(os.environ["THREAD_MARKER"], "w").close()


if __name__ == "__main__":
    sys.exit(0 if os.path.exists(os.environ["THREAD_MARKER"]) else 3)
threading.Thread(target=_finish).start()
