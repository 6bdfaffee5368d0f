"""Run a command and report its own peak memory: `python bench/peak_rss.py CMD ARGS...` passes CMD's output
through, exits with its code, and writes `peak_rss_kb N` as the last line of stderr.

Why a launcher: Linux records, at exec, the memory of the process that execs, and Python starts children with
vfork, so a child started straight from a big process (a pytest worker, a benchmark that just built a database)
reports that process's memory as its own peak. Started from this small launcher, it reports its own."""

import os
import subprocess
import sys

child = subprocess.Popen(sys.argv[1:])
_, status, usage = os.wait4(child.pid, 0)
print(f"peak_rss_kb {usage.ru_maxrss}", file=sys.stderr)
sys.exit(os.waitstatus_to_exitcode(status))
