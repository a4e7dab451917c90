"""A Python interpreter that has imported the third-party libraries DomainBed imports, and forks
a child for each ``python ARGS`` the tests ask it to run (see ``helpers.run_python``).

A new interpreter spends some 10 s of CPU importing torch, torchvision, timm and wilds before
DomainBed's own code runs; a child forked from this one starts with them imported. Nothing of
DomainBed or of this package is imported here, so import order, plugin registration and
everything after it happen in the child as in a new interpreter: the ``.pth`` start-up hook ran
at this interpreter's start, with the same start-up environment (``helpers`` keeps one server
per such environment), but for two the child applies itself: ``PYTHONPATH``, which only adds
folders to ``sys.path`` (the child puts the request's where a new interpreter has them), and
``DMG_DOMAINBED_DISABLE``, which the hook reads when its ``.pth`` line installs it (the child
installs it again, in its own environment). The child takes its arguments, folder and
environment from the request, writes its output into the files named there, and ends as an
interpreter ends (``atexit`` handlers, non-daemon threads joined), with the exit status
``python`` would give.

Protocol, a JSON line each way on stdin/stdout: the request ``{"args", "cwd", "env", "stdout",
"stderr"}`` is answered by ``{"pid"}`` once the child is forked and ``{"status"}`` when it has
ended (a negative status: killed by that signal). End of stdin ends the server at once.
"""

import importlib
import json
import os
import sys
import threading
import time

STARTED_WITH_PYTHON_PATH = os.environ.get("PYTHONPATH", "")

# DomainBed's third-party imports (its algorithms, datasets, networks and train script).
PRELOAD = (
    "numpy",
    "PIL.Image",
    "torch",
    "torch.utils.data",
    "torchvision",
    "torchvision.datasets",
    "torchvision.models",
    "torchvision.transforms",
    "timm",
    "tqdm",
    "wilds.datasets.camelyon17_dataset",
    "wilds.datasets.fmow_dataset",
)


def preload() -> None:
    for name in PRELOAD:
        importlib.import_module(name)
    # wilds checks for a newer release in a thread: no child is forked while it may hold a lock
    deadline = time.monotonic() + 10.0
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join(max(0.0, deadline - time.monotonic()))


def run_child(request: dict, requests, replies) -> None:
    """In the forked child: become ``python ARGS`` and end with its exit status."""
    requests.close()
    replies.close()
    for stream, name in ((1, "stdout"), (2, "stderr")):
        with open(request[name], "w") as file:
            os.dup2(file.fileno(), stream)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    use_python_path(request["env"].get("PYTHONPATH", ""))
    install_start_up_hook()
    try:
        run_as_main(*request["args"])
        status = 0
    except SystemExit as exit:
        status = exit.code if isinstance(exit.code, int) else int(exit.code is not None)
        if exit.code is not None and not isinstance(exit.code, int):
            print(exit.code, file=sys.stderr)
    except BaseException:
        sys.excepthook(*sys.exc_info())
        status = 1
    end(status)


def use_python_path(python_path: str) -> None:
    """Make ``sys.path`` what a new interpreter started here with ``PYTHONPATH=python_path``
    has: its folders, made absolute, right after the script's folder, instead of the server's.
    (``helpers`` sends no PYTHONPATH whose folders hold a module the server may have imported.)"""

    def folders(path: str) -> list[str]:
        return [os.path.abspath(folder) for folder in path.split(os.pathsep) if folder]

    for folder in folders(STARTED_WITH_PYTHON_PATH):
        if folder in sys.path:
            sys.path.remove(folder)
    sys.path[1:1] = folders(python_path)


def install_start_up_hook() -> None:
    """Install this package's start-up hook as its ``.pth`` line does at an interpreter's start
    (``install``, which reads ``DMG_DOMAINBED_DISABLE``), in the child's environment."""
    hook = sys.modules.get("dmg_domainbed._startup")  # imported by the .pth line, if installed
    if hook is None:
        return
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, hook.DomainBedImportWatcher)]
    hook.install()


def run_as_main(option: str, target: str, *rest: str) -> None:
    """Run ``python OPTION TARGET REST`` (``-c CODE`` or ``-m MODULE``) from ``__main__`` on."""
    import runpy
    import types

    if option == "-c":
        sys.argv = ["-c", *rest]
        sys.path[0] = ""
        main = types.ModuleType("__main__")
        sys.modules["__main__"] = main
        exec(compile(target, "<string>", "exec"), main.__dict__)
    elif option == "-m":
        sys.argv = [target, *rest]  # runpy puts the module's file first
        sys.path[0] = os.getcwd()
        runpy.run_module(target, run_name="__main__", alter_sys=True)
    else:
        raise SystemExit(f"preloaded_python runs -c CODE or -m MODULE, not {option!r}")


def end(status: int) -> None:
    """End the child as an interpreter ends, less the freeing of every object at finalisation
    (it writes to each page shared with the server, some 3 s): non-daemon threads joined,
    ``atexit`` handlers run, output flushed."""
    import atexit

    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()  # what an ending interpreter runs; there is no public name for it
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def serve() -> None:
    # the protocol on descriptors of its own; 0 and 1 are the children's stdin and stdout
    requests, replies = os.fdopen(os.dup(0), "r"), os.fdopen(os.dup(1), "w")
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(2, 1)
    preload()
    for line in requests:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            run_child(request, requests, replies)  # never returns
        replies.write(json.dumps({"pid": pid}) + "\n")
        replies.flush()
        _, status = os.waitpid(pid, 0)
        replies.write(json.dumps({"status": os.waitstatus_to_exitcode(status)}) + "\n")
        replies.flush()
    # End at once: nothing here needs finalising, and no thread the imports left may hold it up.
    os._exit(0)


if __name__ == "__main__":
    serve()
