"""The FastCGI connections between nginx and the workers (fcgi/worker.c): nginx keeps them open
between requests (fastcgi_keep_conn and the upstream's keepalive), every idle worker thread
waits on the listening socket and the idle kept connections at once, and an idle kept
connection holds no thread. One worker with two threads, so that a handful of connections
outnumbers the threads."""

import json
import threading

from turns import ids, in_parallel, result_of, script, scripted_request

STACK = {"workers": 1, "threads": 2}


def counters(ctx):
    c = json.loads(ctx.stack.ctl("stats", "--json").stdout)["counters"]
    return c["fcgi_connections"], c["fcgi_kept_requests"]


def burst(ctx, n, path="/health"):
    """n requests at once, each on its own client connection (connected first, then sent
    together): their statuses."""
    out = [None] * n
    ready = threading.Barrier(n)

    def one(i):
        c = ctx.stack.connection(30)
        try:
            c.connect()
            ready.wait(30)
            c.request("GET", path)
            r = c.getresponse()
            r.read()
            out[i] = r.status
        except (OSError, threading.BrokenBarrierError) as e:
            out[i] = repr(e)
        finally:
            c.close()

    in_parallel(one, n, 60)
    return out


def test_turns_reuse_kept_connections(ctx):
    project, session = ids()
    conn0, kept0 = counters(ctx)
    for i in range(20):
        req = scripted_request(script([{"chunk": f"t{i}"}]), projectId=project, sessionId=session)
        status, recs = ctx.stack.stream(req)
        assert status == 200, recs
        assert result_of(recs)["ok"] is True, result_of(recs)
    conn1, kept1 = counters(ctx)
    ctx.stack.ctl("kill", f"{project}:{session}")
    new, kept = conn1 - conn0, kept1 - kept0
    # every request came on a new connection or a kept one; nginx's two worker processes each
    # open their first, the rest reuse them
    assert new + kept >= 20, (new, kept)
    assert kept >= 15, f"only {kept} of 20 turns came on a kept connection ({new} new ones)"


def test_idle_kept_connections_hold_no_thread(ctx):
    conn0, kept0 = counters(ctx)
    # twelve requests at once: nginx opens a connection for each one its cache cannot give,
    # the two threads answer them in turn, and nginx keeps every one of them afterwards
    first = burst(ctx, 12)
    assert first == [200] * 12, first
    conn1, kept1 = counters(ctx)
    for _ in range(5):  # requests that happen to come one after another share connections
        if conn1 - conn0 > 2:
            break
        assert burst(ctx, 24) == [200] * 24
        conn1, kept1 = counters(ctx)
    assert conn1 - conn0 > 2, (
        f"the burst opened {conn1 - conn0} connections: not more than the 2 threads, so it "
        "shows nothing")
    # more idle kept connections than threads now: requests on any of them are answered (a
    # thread that waited on one connection would leave the others' requests unread)
    for _ in range(3):
        again = burst(ctx, 12)
        assert again == [200] * 12, again
    conn2, kept2 = counters(ctx)
    print(f"    {conn1 - conn0} connections for 2 threads; then {kept2 - kept1} requests on "
          f"kept ones, {conn2 - conn1} new")
    assert kept2 - kept1 >= 12, (conn2 - conn1, kept2 - kept1)
