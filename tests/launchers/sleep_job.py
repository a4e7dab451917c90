"""A job for the launcher lifetime tests: ``python -m tests.launchers.sleep_job SECONDS MARKER``
writes its pid into MARKER, once it runs, and sleeps. It imports nothing heavy: what these
tests check (process groups, signals, the end of the launcher) does not depend on what a job
imported, and each job that is a new process would otherwise pay torch's imports."""

import os
import sys
import time

if __name__ == "__main__":
    seconds, marker = sys.argv[1:]
    with open(marker, "w") as out:
        out.write(str(os.getpid()))
    time.sleep(float(seconds))
