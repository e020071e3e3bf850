# The Python driver of @polyloop/sandbox (design 0330). Runs inside the sandbox as
# `python3 -s -u driver.py` (not -I: it implies -E, which ignores PYTHONHASHSEED); keeps one global namespace and executes each action in it.
# Protocol: requests are JSON lines on the original standard input, replies JSON lines on the
# original standard error; the action's own standard input is /dev/null and its standard output
# and error are one stream (the host reads it), ended after each action by a boundary token.
import ast, base64, importlib, io, json, linecache, os, signal, sys, traceback, types

proto_in = os.fdopen(os.dup(0), "rb", buffering=0)
ctl = os.fdopen(os.dup(2), "wb", buffering=0)
_null = os.open("/dev/null", os.O_RDONLY)
os.dup2(_null, 0)
os.close(_null)
os.dup2(1, 2)
sys.stdin = open(os.devnull, "r")
sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", buffering=0, closefd=False), encoding="utf-8", errors="replace", write_through=True)
sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", buffering=0, closefd=False), encoding="utf-8", errors="replace", write_through=True)

try:
    import dill as pickler
    PICKLER = "dill"
except Exception:
    import pickle as pickler
    PICKLER = "pickle"
import pickle


class FinalAnswer(BaseException):
    def __init__(self, value):
        super().__init__()
        self.value = value


def final_answer(value):
    """Ends the action and reports the run's answer."""
    raise FinalAnswer(value)


MAIN_PID = os.getpid()

namespace = {"__name__": "__main__", "__builtins__": __builtins__, "final_answer": final_answer}
BASE_NAMES = set(namespace)


def reply(message):
    ctl.write((json.dumps(message) + "\n").encode("utf-8"))


# What the driver sends is bounded (design 0331, decision 5): a longer text is cut and says so.
MAX_TEXT = 4 * 1024 * 1024


def bounded(text):
    if len(text) <= MAX_TEXT:
        return text
    return text[:MAX_TEXT] + "\n[cut: %d more characters]" % (len(text) - MAX_TEXT)


def others():
    """The processes of the sandbox's pid namespace but its init and this interpreter, not yet exited."""
    found = []
    me = os.getpid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in (1, me):
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state not in (b"Z", b"X"):
            found.append(int(name))
    return found


def reap_children():
    """Collects every child of this interpreter that has exited (killed ones included)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def reap():
    """Kills every process an action left in the sandbox (design 0331, decision 2): in its own pid
    namespace, kill(-1) reaches exactly those but init and the caller; repeated while any runs."""
    for _ in range(256):
        if not others():
            break
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass
        reap_children()
    reap_children()


def user_traceback(exc):
    te = traceback.TracebackException.from_exception(exc)
    te.stack = traceback.StackSummary.from_list([f for f in te.stack if f.filename.startswith("<step") or f.filename == "<code>"])
    text = "".join(te.format())
    if not te.stack:
        text = "".join(te.format_exception_only())
    return text


def run(code, name):
    # The CPU limit of the action is set by the host (prlimit --pid, design 0330 amendment 1).
    filename = "<%s>" % name
    linecache.cache[filename] = (len(code), None, [line + "\n" for line in code.splitlines()], filename)
    result = {"error": None, "final": None, "exit": None}
    try:
        tree = ast.parse(code, filename, "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, filename, "exec"), namespace)
        if last is not None:
            value = eval(compile(last, filename, "eval"), namespace)
            if value is not None:
                print(repr(value))
    except FinalAnswer as answer:
        value = answer.value
        result["final"] = bounded(value if isinstance(value, str) else repr(value))
    except SystemExit as exit:
        result["exit"] = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
        if exit.code is not None and not isinstance(exit.code, int):
            print(exit.code)
    except BaseException as exc:
        result["error"] = {"type": type(exc).__name__, "message": bounded(str(exc)), "traceback": bounded(user_traceback(exc))}
    return result


def saveable_names():
    for name, value in list(namespace.items()):
        if name in BASE_NAMES or (name.startswith("__") and name.endswith("__")):
            continue
        yield name, value


def save(path, limit=None):
    # A value that would take the state file past `limit` (the sandbox's largest file) is listed
    # as not saved (design 0331, decision 4); 64 KiB are kept for the file's own framing.
    budget = None if limit is None else max(0, limit - 64 * 1024)
    values, modules, saved, unsaved = {}, {}, [], []
    for name, value in saveable_names():
        if isinstance(value, types.ModuleType):
            modules[name] = value.__name__
            saved.append(name)
            continue
        if isinstance(value, io.IOBase):
            # dill would reopen a file on load, in its mode: a file opened for writing would be truncated.
            unsaved.append({"name": name, "reason": "%s: files are not saved" % type(value).__name__})
            continue
        try:
            data = pickler.dumps(value)
        except BaseException as exc:
            unsaved.append({"name": name, "reason": "%s: %s" % (type(value).__name__, type(exc).__name__)})
            continue
        if budget is not None and len(data) + len(name) + 64 > budget:
            unsaved.append({"name": name, "reason": "%s: larger than %d bytes" % (type(value).__name__, limit)})
            continue
        if budget is not None:
            budget -= len(data) + len(name) + 64
        values[name] = data
        saved.append(name)
    tmp = path + ".tmp"
    try:
        with open(tmp, "wb") as f:
            pickle.dump({"pickler": PICKLER, "values": values, "modules": modules, "order": saved}, f)
    except OSError as exc:
        # The file could still not be written (no space left, say): no values, every name listed.
        reason = "not saved: %s" % (exc.strerror or type(exc).__name__)
        unsaved += [{"name": name, "reason": reason} for name in saved]
        saved = []
        with open(tmp, "wb") as f:
            pickle.dump({"pickler": PICKLER, "values": {}, "modules": {}, "order": []}, f)
    os.replace(tmp, path)
    return {"saved": saved, "unsaved": unsaved, "pickler": PICKLER}


def load(path):
    with open(path, "rb") as f:
        state = pickle.load(f)
    restored, lost = [], []
    for name in state["order"]:
        try:
            if name in state["modules"]:
                namespace[name] = importlib.import_module(state["modules"][name])
            else:
                namespace[name] = pickler.loads(state["values"][name])
            restored.append(name)
        except BaseException as exc:
            lost.append({"name": name, "reason": type(exc).__name__})
    return {"restored": restored, "lost": lost}


def main():
    reply({"ready": True, "python": sys.version.split()[0], "pickler": PICKLER})
    for line in proto_in:
        request = json.loads(line)
        op = request.get("op")
        if op == "exec":
            result = run(request["code"], request.get("name", "code"))
            if os.getpid() != MAIN_PID:
                # A process the code forked came back here: it must not answer or read requests.
                os._exit(0)
            if request.get("reap"):
                reap()
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except BaseException:
                pass
            os.write(1, request["boundary"].encode("utf-8"))
            result["id"] = request["id"]
            reply(result)
        elif op == "save":
            try:
                out = save(request["path"], request.get("limit"))
            except BaseException as exc:
                out = {"failed": "%s: %s" % (type(exc).__name__, exc)}
            out["id"] = request["id"]
            reply(out)
        elif op == "load":
            try:
                out = load(request["path"])
            except BaseException as exc:
                out = {"failed": "%s: %s" % (type(exc).__name__, exc)}
            out["id"] = request["id"]
            reply(out)


main()
