#!/usr/bin/env python3
"""Runs a client command and measures, over its run, its own CPU seconds
(wait4's rusage: user + system of the whole process) and the CPU seconds a
server process spent meanwhile (utime + stime of /proc/PID/stat, every
thread). Prints "client_cpu_s server_cpu_s wall_s". Used by the benches to
give CPU-seconds per GiB for each end, the same way for every tool.

Usage: bench/cpu.py SERVER_PID OUTFILE CMD...   (CMD's stdout+stderr -> OUTFILE)
"""
import os, sys, time

def proc_cpu(pid):
    s = open(f"/proc/{pid}/stat").read()
    f = s[s.rfind(")") + 2:].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

server, out, cmd = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
s0, t0 = proc_cpu(server), time.monotonic()
pid = os.fork()
if pid == 0:
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1); os.dup2(fd, 2)
    os.execvp(cmd[0], cmd)
_, status, ru = os.wait4(pid, 0)
wall = time.monotonic() - t0
# A server ends its session's work just after the client; let its CPU land.
time.sleep(0.2)
s1 = proc_cpu(server)
print("%.3f %.3f %.3f" % (ru.ru_utime + ru.ru_stime, s1 - s0, wall))
sys.exit(os.waitstatus_to_exitcode(status) if os.waitstatus_to_exitcode(status) > 0 else 0)
