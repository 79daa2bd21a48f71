"""Real programs from Debian packages, run under each allocator (BENCH.md, "Real programs").

Each program runs on a generated input or a script from bench/programs/, sized per mode
(smoke, quick, full) and, for the cachegrind pass, on a shortened input. Every run goes
through the bench_exec_rusage helper (bench/workloads/exec_rusage.c), which gives the
program its LD_PRELOAD and reports what wait4 counted: user and system CPU time, peak RSS
and page faults of the program and of every process it waited for. A run is correct when
it exits 0 and prints exactly what the same program printed on the same input with
nothing preloaded (the reference run); any other output is a wrong answer.

  lua     lua5.4 bench/programs/churn.lua STEPS POPULATION SEED     tables and strings, GC
  python  /usr/bin/python3 -S bench/programs/churn.py STEPS POP SEED  objects, PYTHONMALLOC=malloc
  perl    perl bench/programs/churn.pl STEPS POPULATION SEED        hashes and strings
  redis   redis-server on 127.0.0.1 (only the server is measured): a generated data set
          loaded with redis-cli --pipe, then redis-benchmark, then the data set read back
  sqlite  sqlite3 :memory: on a generated script (inserts, indexes, joins, group by)
  git     sh bench/programs/git_workload.sh: fast-import of a generated history,
          porcelain commits, repack, log -p, blame, diff, fsck

A program whose executables are missing (package not installed) is skipped with a note.
"""

import glob
import hashlib
import os
import shlex
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field

import program_inputs
import runner

BENCH_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAMS_DIR = os.path.join(BENCH_DIR, "programs")
HELPER = "exec_rusage"  # the workload binary that runs a program and reports its rusage
SEED = 1

# Debian's redis-server is linked with libjemalloc.so.2, so with nothing preloaded its
# malloc is jemalloc's. Its glibc row preloads the C library itself, which puts glibc's
# malloc ahead of jemalloc's in the symbol search order.
LIBC_CANDIDATES = ("/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6",
                   "/lib/*-linux-gnu/libc.so.6", "/lib64/libc.so.6")


def find_libc():
    for pattern in LIBC_CANDIDATES:
        for path in sorted(glob.glob(pattern)):
            if os.path.exists(path):
                return path
    return None


# ---- one run ---------------------------------------------------------------------------

@dataclass
class Run:
    """What one run of a program did."""

    wall_seconds: float
    exit_status: int  # the measured process's exit code, or minus the signal number
    output: str  # what is compared with the reference run
    stderr: str
    timed_out: bool
    rusage: dict  # the helper's counts (utime_us, stime_us, maxrss_kib, minflt, ...) or None
    command: str  # the exact command line(s)
    error: str = None  # a failure found by the driver itself (a client that failed, say)
    extra: dict = field(default_factory=dict)

    def status(self):
        """ok, failed, crashed or timeout (the output is compared by the caller)."""
        if self.timed_out:
            return "timeout"
        if self.exit_status < 0:
            return "crashed"
        if self.exit_status != 0 or self.error or self.rusage is None:
            return "failed"
        return "ok"

    def message(self):
        status = self.status()
        if status == "ok":
            return None
        if status == "timeout":
            return "killed after the time limit"
        lines = [l.strip() for l in self.stderr.splitlines() if l.strip() and not l.startswith(("==", "--"))]
        last = (": " + lines[-1][:300]) if lines else ""
        if status == "crashed":
            return "killed by signal %d%s" % (-self.exit_status, last)
        if self.error:
            return self.error
        if self.rusage is None:
            return "no resource usage from the helper (exit %d)%s" % (self.exit_status, last)
        return "exit %d%s" % (self.exit_status, last)


def parse_rusage(text):
    """The helper's line 'utime_us=U stime_us=S maxrss_kib=K ... exit=E' as a dict of
    ints, or None when it is missing or incomplete."""
    pairs = {}
    for token in (text or "").split():
        key, sep, value = token.partition("=")
        if sep:
            try:
                pairs[key] = int(value)
            except ValueError:
                return None
    needed = ("utime_us", "stime_us", "maxrss_kib", "minflt", "exit")
    return pairs if all(k in pairs for k in needed) else None


def first_difference(expected, got):
    """A short description of where two outputs differ, or None when they are equal."""
    if expected == got:
        return None
    a, b = expected.splitlines(), got.splitlines()
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return "line %d is %r, expected %r" % (i + 1, y[:120], x[:120])
    if len(a) != len(b):
        return "%d lines, expected %d" % (len(b), len(a))
    return "the outputs differ in line endings or trailing text"


def digest(text):
    return hashlib.sha256(text.encode()).hexdigest()


def child_env(env):
    """The environment for the helper: the allocator's LD_PRELOAD handed over in
    BENCH_CHILD_LD_PRELOAD, so that the helper itself runs without it."""
    env = dict(env)
    env["BENCH_CHILD_LD_PRELOAD"] = env.pop("LD_PRELOAD", "")
    return env


def _prefix_line(env, keys):
    preload = env.get("BENCH_CHILD_LD_PRELOAD") or env.get("LD_PRELOAD")
    words = ["LD_PRELOAD=%s" % shlex.quote(preload)] if preload else []
    words += ["%s=%s" % (k, shlex.quote(env[k])) for k in sorted(keys) if k in env]
    return " ".join(words)


def _read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return ""


# ---- the programs ----------------------------------------------------------------------

@dataclass(frozen=True)
class Program:
    """A real program: `sizes[scale]` are its size parameters ("cachegrind" is the
    shortened input of the cachegrind pass), `env` the variables every run gets."""

    name: str
    package: str
    executables: tuple
    description: str
    sizes: dict
    env: dict = field(default_factory=dict)
    trace_children: bool = False  # valgrind must follow the processes it starts...
    untraced: tuple = ()  # ...except these (the shell and its small utilities)
    glibc_preloads_libc: bool = False  # linked with another malloc: see find_libc
    # Started on the helper's pid for the length of a run when set: watch(pid).stop()
    # returns figures for the run's extra (bigheap.PeakSampler); a class attribute.
    watch = None

    def missing(self):
        """None when every executable is there, else the note that skips the program."""
        absent = [e for e in self.executables if not (shutil.which(e) if "/" not in e else os.access(e, os.X_OK))]
        if absent:
            return "package %s not installed (%s not found)" % (self.package, ", ".join(absent))
        return None

    def params(self, size):
        return " ".join("%s=%s" % kv for kv in size.items())

    def prepare(self, size, input_dir):
        """Writes the inputs of this size into input_dir; returns what run() needs."""
        return {"size": size, "input_dir": input_dir}

    def argv(self, ctx, run_dir):
        raise NotImplementedError

    def run(self, ctx, env, timeout, helper, run_dir, prefix=()):
        """One run: env is the allocator's (LD_PRELOAD set or not), prefix goes before the
        program (valgrind), run_dir is an empty scratch directory of this run."""
        argv = list(prefix) + self.argv(ctx, run_dir)
        env = child_env(dict(env, **self.env))
        rusage_file = os.path.join(run_dir, "rusage.txt")
        out = runner.run([helper, rusage_file] + argv, env, timeout, watch=self.watch)
        return Run(wall_seconds=out.wall_seconds, exit_status=out.exit_status, output=out.stdout,
                   stderr=out.stderr, timed_out=out.timed_out, rusage=parse_rusage(_read(rusage_file)),
                   command=(_prefix_line(env, self.env) + " " + shlex.join(argv)).strip(), extra=out.watched or {})


@dataclass(frozen=True)
class Script(Program):
    """An interpreter running a script of bench/programs/ with STEPS POPULATION SEED."""

    interpreter: tuple = ()
    script: str = ""

    def argv(self, ctx, run_dir):
        size = ctx["size"]
        return list(self.interpreter) + [os.path.join(PROGRAMS_DIR, self.script), str(size["steps"]),
                                         str(size["population"]), str(SEED)]


@dataclass(frozen=True)
class Sqlite(Program):
    def prepare(self, size, input_dir):
        path = os.path.join(input_dir, "sqlite-%d.sql" % size["orders"])
        _write_once(path, program_inputs.sql_script(size["orders"], SEED).encode())
        return {"size": size, "script": path}

    def argv(self, ctx, run_dir):
        return ["sqlite3", "-batch", ":memory:", ".read %s" % ctx["script"]]


@dataclass(frozen=True)
class Git(Program):
    def prepare(self, size, input_dir):
        path = os.path.join(input_dir, "git-%d.fi" % size["commits"])
        _write_once(path, program_inputs.git_fast_import(size["commits"], size["files"], SEED))
        return {"size": size, "stream": path}

    def argv(self, ctx, run_dir):
        return ["sh", os.path.join(PROGRAMS_DIR, "git_workload.sh"), os.path.join(run_dir, "work"),
                ctx["stream"], program_inputs.HOT_FILE]


@dataclass(frozen=True)
class Redis(Program):
    """redis-server measured, its clients (redis-cli, redis-benchmark) not: the server
    starts through the helper on a free port of 127.0.0.1, gets the generated data set in
    database 0 with redis-cli --pipe, then redis-benchmark runs its tests against
    database 1, then redis-cli reads database 0 back, and SHUTDOWN NOSAVE stops the
    server (killed if it does not stop). The output compared is the data set's load
    summary, the list of tests redis-benchmark completed and what the read-back printed."""

    tests: str = "set,get,incr,lpush,rpush,lpop,rpop,sadd,hset,spop,zadd,zpopmin,lrange_100,mset"

    def prepare(self, size, input_dir):
        data, checks = program_inputs.redis_dataset(size["keys"], SEED)
        data_path = os.path.join(input_dir, "redis-%d.resp" % size["keys"])
        checks_path = os.path.join(input_dir, "redis-%d.checks" % size["keys"])
        _write_once(data_path, data)
        _write_once(checks_path, checks.encode())
        return {"size": size, "data": data_path, "checks": checks_path}

    def server_argv(self, port, run_dir):
        return ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--protected-mode", "yes",
                "--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", run_dir,
                "--logfile", os.path.join(run_dir, "redis.log")]

    def benchmark_argv(self, port, size):
        return ["redis-benchmark", "-h", "127.0.0.1", "-p", str(port), "-n", str(size["requests"]),
                "-c", "8", "-P", "8", "-r", "50000", "-d", "64", "--dbnum", "1", "-t", self.tests, "--csv"]

    def command_line(self, env, prefix, ctx, run_dir):
        """The commands of a run as shell lines, with $PORT for the port."""
        cli = shlex.join(["redis-cli", "-h", "127.0.0.1", "-p", "$PORT"])
        line = "%s %s &\n%s --pipe < %s\n%s\n%s < %s\n%s SHUTDOWN NOSAVE" % (
            _prefix_line(env, self.env), shlex.join(list(prefix) + self.server_argv("$PORT", run_dir)), cli,
            ctx["data"], shlex.join(self.benchmark_argv("$PORT", ctx["size"])), cli, ctx["checks"], cli)
        return line.replace("'$PORT'", "$PORT").strip()

    def session(self, client, cli, ctx, port):
        """The clients' part of a run, between the server's first PONG and its SHUTDOWN:
        (output lines, error or None). client(argv, stdin_path) runs one client."""
        output, error = [], None
        load = client(cli + ["--pipe"], ctx["data"])
        summary = [l for l in load.stdout.splitlines() if l.startswith("errors:")]
        if load.returncode != 0 or not summary or not summary[-1].startswith("errors: 0,"):
            error = "redis-cli --pipe failed: %s" % (summary[-1] if summary else load.stderr.strip()[-200:])
        output.append("load " + (summary[-1] if summary else ""))
        res = client(self.benchmark_argv(port, ctx["size"]))
        tests = [l.split(",")[0].strip('"') for l in res.stdout.splitlines()[1:] if l.startswith('"')]
        if res.returncode != 0 and error is None:
            error = "redis-benchmark exited %d: %s" % (res.returncode, res.stderr.strip()[-200:])
        output.append("benchmark " + ";".join(tests))
        res = client(cli, ctx["checks"])
        if res.returncode != 0 and error is None:
            error = "redis-cli read-back exited %d" % res.returncode
        output.append(res.stdout)
        return output, error

    def run(self, ctx, env, timeout, helper, run_dir, prefix=()):
        deadline = time.monotonic() + timeout
        port = free_port()
        server = list(prefix) + self.server_argv(port, run_dir)
        env = child_env(dict(env, **self.env))
        client_env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
        rusage_file = os.path.join(run_dir, "rusage.txt")
        cli = ["redis-cli", "-h", "127.0.0.1", "-p", str(port)]
        command = self.command_line(env, prefix, ctx, run_dir)
        err_path = os.path.join(run_dir, "server.err")
        start = time.perf_counter()
        with open(err_path, "wb") as err:
            proc = subprocess.Popen([helper, rusage_file] + server, stdin=subprocess.DEVNULL, stdout=err,
                                    stderr=err, env=env, start_new_session=True)
        watcher = self.watch(proc.pid) if self.watch else None
        output, error, timed_out, watched = [], None, False, {}
        try:
            def client(argv, stdin_path=None):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise subprocess.TimeoutExpired(argv, 0)
                with open(stdin_path or os.devnull, "rb") as stdin:
                    return subprocess.run(argv, stdin=stdin, capture_output=True, text=True, env=client_env,
                                          timeout=left)

            if not wait_for_redis(port, proc, deadline):
                error = "the server did not answer PING on 127.0.0.1:%d" % port
            else:
                output, error = self.session(client, cli, ctx, port)
                client(cli + ["SHUTDOWN", "NOSAVE"])
            proc.wait(max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            if watcher is not None:
                watched = watcher.stop()
        return Run(wall_seconds=time.perf_counter() - start, exit_status=proc.returncode, output="\n".join(output),
                   stderr=_read(err_path), timed_out=timed_out, rusage=parse_rusage(_read(rusage_file)),
                   command=command, error=error, extra=dict(watched, port=port))


def _write_once(path, data):
    """Writes data to path unless the file already holds exactly that."""
    try:
        with open(path, "rb") as f:
            if f.read() == data:
                return
    except OSError:
        pass
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def free_port():
    """A TCP port of 127.0.0.1 that nothing listened on a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_redis(port, proc, deadline):
    """True once the server answers PING; False if it exits or the deadline passes."""
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0) as s:
                s.sendall(b"PING\r\n")
                if s.recv(64).startswith(b"+PONG"):
                    return True
        except OSError:
            pass
        time.sleep(0.02)
    return False


LC = {"LC_ALL": "C"}

PROGRAMS = [
    Script("lua", "lua5.4", ("lua5.4",), "Lua 5.4 script churning tables and strings (its GC frees them)",
           {"smoke": {"steps": 200, "population": 128}, "quick": {"steps": 20000, "population": 4096},
            "full": {"steps": 50000, "population": 16384}, "cachegrind": {"steps": 600, "population": 512}},
           env=LC, interpreter=("lua5.4",), script="churn.lua"),
    Script("python", "python3", ("/usr/bin/python3",),
           "Debian's python3 with PYTHONMALLOC=malloc churning objects, dicts and strings",
           {"smoke": {"steps": 200, "population": 128}, "quick": {"steps": 6000, "population": 4096},
            "full": {"steps": 15000, "population": 16384}, "cachegrind": {"steps": 300, "population": 256}},
           env=dict(LC, PYTHONMALLOC="malloc", PYTHONHASHSEED="0", PYTHONDONTWRITEBYTECODE="1"),
           interpreter=("/usr/bin/python3", "-S"), script="churn.py"),
    Script("perl", "perl", ("perl",), "Perl script of hashes, arrays and string operations",
           {"smoke": {"steps": 200, "population": 128}, "quick": {"steps": 6000, "population": 4096},
            "full": {"steps": 20000, "population": 16384}, "cachegrind": {"steps": 300, "population": 256}},
           env=dict(LC, PERL_HASH_SEED="0", PERL_PERTURB_KEYS="0"), interpreter=("perl",), script="churn.pl"),
    Redis("redis", "redis-server, redis-tools", ("redis-server", "redis-cli", "redis-benchmark"),
          "redis-server on 127.0.0.1: a generated data set, redis-benchmark, the data set read back",
          {"smoke": {"keys": 200, "requests": 500}, "quick": {"keys": 2000, "requests": 4000},
           "full": {"keys": 10000, "requests": 50000}, "cachegrind": {"keys": 400, "requests": 300}},
          env=LC, glibc_preloads_libc=True),
    Sqlite("sqlite", "sqlite3", ("sqlite3",),
           "sqlite3 :memory: on a generated script: inserts, indexes, joins, group by",
           {"smoke": {"orders": 500}, "quick": {"orders": 20000}, "full": {"orders": 150000},
            "cachegrind": {"orders": 1000}},
           env=LC),
    Git("git", "git", ("git", "sh"), "git on a generated history: fast-import, commits, repack, log -p, blame, fsck",
        {"smoke": {"commits": 10, "files": 5}, "quick": {"commits": 150, "files": 40},
         "full": {"commits": 800, "files": 40}, "cachegrind": {"commits": 15, "files": 10}},
        env=LC, trace_children=True, untraced=("sh", "dash", "cksum", "wc", "head", "ls", "sed", "mkdir")),
]


def names():
    return [p.name for p in PROGRAMS]


def selected(only=None):
    """The programs matching the --only filter (names or name prefixes)."""
    return [p for p in PROGRAMS if not only or any(p.name == o or p.name.startswith(o) for o in only)]


def cachegrind_size(program, scale):
    return program.sizes["smoke"] if scale == "smoke" else program.sizes["cachegrind"]


def cachegrind_prefix(program):
    argv = runner.cachegrind_argv(program.trace_children)
    if program.untraced:
        argv.append("--trace-children-skip=" + ",".join("*/" + name for name in program.untraced))
    return argv


def package_version(program):
    """The Debian package versions, as 'pkg=version' joined by spaces ('' if unknown)."""
    found = []
    for package in program.package.replace(",", " ").split():
        try:
            out = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True,
                                 text=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0 and out.stdout.strip():
            found.append("%s=%s" % (package, out.stdout.strip()))
    return " ".join(found)

