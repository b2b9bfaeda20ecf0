"""What coldread-cases.py and write-cases.py share: a daemon on an emu
device started and stopped per run, fio's JSON result of a job, the order
of sides in a round (the first side alternating too) and the summary's
median, range, spread and ratio."""
import json, os, signal, statistics as st, subprocess, time

TICK = os.sysconf("SC_CLK_TCK")


def cpu_of(pid):
    """CPU seconds (user + system) the process has used so far."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


class Daemon:
    """`BINARY serve DEVICE --socket SOCK --cache CACHE EXTRA...`, its output
    appended to LOG; ready once it answers (its arena faulted in)."""

    def __init__(self, binary, device, sock, cache, log, extra=()):
        if os.path.exists(sock):
            os.unlink(sock)
        self.log = open(log, "a")
        cmd = [binary, "serve", device, "--socket", sock, "--cache", cache] + list(extra)
        self.p = subprocess.Popen(cmd, stdout=self.log, stderr=self.log)
        for _ in range(200):
            if os.path.exists(sock):
                break
            time.sleep(0.05)
        subprocess.run([binary, "ls", "--socket", sock], check=True, capture_output=True)

    def cpu(self):
        return cpu_of(self.p.pid)

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        self.p.wait()
        self.log.close()


def fio_job(path):
    """The first job of fio's JSON result for the job file at path."""
    out = subprocess.run(["fio", path, "--output-format=json"], check=True, capture_output=True, text=True).stdout
    return json.loads(out[out.index("{"):])["jobs"][0]


def order(sides, rnd):
    """The sides in round rnd: as given in even rounds, reversed in odd."""
    return sides if rnd % 2 == 0 else sides[::-1]


def summary(values, base):
    """Median, '(min-max)', spread of values and the ratio of their median
    to base's median."""
    m = st.median(values)
    return m, "(%.0f-%.0f)" % (min(values), max(values)), max(values) / max(min(values), 1e-9), m / max(st.median(base), 1e-9)
