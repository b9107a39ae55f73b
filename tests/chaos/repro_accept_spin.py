#!/usr/bin/env python3
"""Reproducer: a stopping worker spins forever in libfcgi's OS_Accept.

fcgi/worker.c stops its threads with FCGX_ShutdownPending() and SIGUSR1 to every thread whose
`accepting` flag is set. A thread that has just accept()ed a unix-socket connection sits in
libfcgi's is_af_unix_keeper() (a 2 s poll for the first byte) with `accepting` still set; the
SIGUSR1 interrupts that poll (EINTR -> "not a keeper"), OS_Accept close()s the connection and
loops, and because shutdownPending is now set its inner `do { if (shutdownPending) break;
accept(...) }` leaves WITHOUT calling accept(): `socket` still holds the fd it just closed, so
it polls (POLLNVAL) and closes (EBADF) that stale fd forever, at 100% CPU. worker_main() waits
for `accepting` to clear and never gets to exit.

After kill -9 of the master (the workers get SIGTERM through PR_SET_PDEATHSIG) nobody ever
SIGKILLs that worker: it stays, orphaned, spinning, holding the old listening socket, the
session table and the log. (On a normal SIGTERM drain the master SIGKILLs it at the drain
deadline, so shutdown takes the full AGENT_RUNNER_DRAIN_MS.)

Under load no idle connection is needed: any request accepted in the few ms before its first
byte arrives is enough (the chaos runs hit it on master kills). Here a raw client connects to
the FastCGI socket and sends nothing, which makes it deterministic.

Exit status 1 while the bug is present, 0 when fixed. The spinning process is SIGKILLed.
"""

import os
import socket
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
sys.path.insert(0, HERE)

import stack as stk  # noqa: E402
from chaos import run_repro  # noqa: E402


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    return int(rest[11]) + int(rest[12])


def check(st):
    worker = st.worker_pids()[0]
    bug = False
    idle = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    idle.connect(st.sock)       # accepted by a worker thread, which waits for a first byte
    time.sleep(0.3)
    st.master.kill()            # the worker gets SIGTERM (PR_SET_PDEATHSIG) and stops
    st.master.wait()
    time.sleep(3)
    alive = stk.proc_table().get(worker)
    if alive and not alive[1].startswith("[zombie]"):
        t0 = cpu_ticks(worker)
        time.sleep(1)
        used = (cpu_ticks(worker) - t0) / os.sysconf("SC_CLK_TCK")
        running = [t for t in os.listdir(f"/proc/{worker}/task")
                   if open(f"/proc/{worker}/task/{t}/stat").read().rsplit(")", 1)[1].split()[0]
                   == "R"]
        print(f"worker {worker}: still alive 3s after its master died, orphaned "
              f"(ppid {alive[0]}), {used:.2f}s CPU in the last 1s, running threads "
              f"{running}")
        bug = True
        os.kill(worker, 9)
    else:
        print(f"worker {worker} exited after its master died")
    idle.close()
    return bug


if __name__ == "__main__":
    sys.exit(run_repro(check))
