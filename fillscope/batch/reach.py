"""Joining a Ray cluster at an address within a deadline, the caller's cancel check called while it waits.

Measured with Ray 2.60 here: `ray.init(address=...)` does not return against a port where nothing listens, a host
name that does not resolve, or a port that accepts TCP and never answers. Its GCS client is built up to 20 times
(RAY_NUM_REDIS_GET_RETRIES), each attempt waiting ~36 s (5 s to connect, 30 s for the cluster's id), in C++ code that
neither a timeout nor an interrupt reaches: about 12 minutes. So the address is checked here first, each wait on a
deadline and polled every POLL_S: the host name resolved (on a thread), a TCP connection to the address Ray dials
(Ray dials a loopback host at this machine's own IP), and Ray's own GCS client built on a thread (it asks the GCS
for the cluster's id; given up on, it ends by itself and leaves no state behind). Only then `ray.init` runs, on a
thread waited for until the same deadline; a call given up on (deadline, cancel) is shut down when it returns, and
no other connect starts before it has. Errors name the address and what to check; nothing is left initialised.
"""

from __future__ import annotations

import errno
import math
import os
import socket
import threading
import time

from ..errors import FillScopeInputError

CONNECT_TIMEOUT_S = 30  # the default of --connect-timeout (the node's connect_timeout); bounds.BATCH has the range
POLL_S = 0.25  # the cancel check is called at least this often while a connect waits
RAY_CLIENT_PORT = 10001  # a ray:// address without a port
IN_PROGRESS = (errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EALREADY)  # a non-blocking connect under way

_given_up: list = []  # (thread, address): ray.init calls a connect stopped waiting for, still running


class _Clock:
    """The deadline of one connect and the caller's cancel check (raises to cancel)."""

    def __init__(self, timeout_s: float, check_cancel):
        self.timeout_s, self.check_cancel = timeout_s, check_cancel
        self.end = time.monotonic() + timeout_s

    def step(self) -> float:
        """Calls the cancel check; how long to wait before looking again (0 once the deadline has passed)."""
        if self.check_cancel is not None:
            self.check_cancel()
        return max(0.0, min(POLL_S, self.end - time.monotonic()))


def _on_thread(fn, name: str):
    """fn() on a daemon thread: (thread, box with "value" or "error", event set when it returned)."""
    box, done = {}, threading.Event()

    def target():
        try:
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001  (handed to the waiting caller)
            box["error"] = e
        finally:
            done.set()

    thread = threading.Thread(target=target, name=name, daemon=True)
    thread.start()
    return thread, box, done


def _wait(done: threading.Event, clock: _Clock) -> bool:
    """Waits for `done` until the deadline, calling the cancel check every POLL_S; whether it was set."""
    while not done.is_set():
        step = clock.step()
        if step <= 0:
            return done.is_set()
        done.wait(step)
    return True


def check_timeout(timeout_s) -> float:
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not math.isfinite(timeout_s) \
            or timeout_s <= 0:
        raise FillScopeInputError("--connect-timeout", f"is {timeout_s!r}.",
                                  f"give the seconds to wait for the cluster, e.g. {CONNECT_TIMEOUT_S}.")
    return float(timeout_s)


class _Join:
    """One connect's wording: the address as given, the one Ray dials, the timeout."""

    def __init__(self, ray, address: str, timeout_s: float):
        self.ray, self.address, self.timeout_s = ray, address, timeout_s
        self.fix = ("check that `ray start --head` runs on that machine and printed this address (the host, and the "
                    "port: 6379 unless --port was given), that no firewall blocks the port from this machine, and "
                    f"that the cluster runs this machine's Ray version ({getattr(ray, '__version__', '?')}; `ray "
                    "--version` there); or raise the connect timeout for a slow network, or run the batch on a local "
                    "Ray instead.")

    note = ""  # how Ray dials the address, when that differs from it

    def error(self, problem: str, fix: str | None = None) -> FillScopeInputError:
        return FillScopeInputError("--ray", f"could not join the Ray cluster at '{self.address}'{self.note}: "
                                            f"{problem}", fix or self.fix)

    def late(self, what: str) -> FillScopeInputError:
        return self.error(f"{what} within the connect timeout of {self.timeout_s:g} s.")

    def target(self) -> tuple[str, int, str]:
        """(host, port) Ray dials, and how it is shown ('host:port')."""
        from ray._common.network_utils import parse_address

        address = self.address
        try:
            if address.startswith("ray://"):  # Ray Client: ray.init connects it
                rest = address[len("ray://"):].split("/")[0]
                parsed = parse_address(rest) or (rest, RAY_CLIENT_PORT)
            else:
                from ray._private.services import canonicalize_bootstrap_address

                dialled = canonicalize_bootstrap_address(address)  # "auto": the running cluster's address
                if dialled is None:
                    raise ValueError("no address")
                parsed = parse_address(dialled)
            host, port = parsed[0], int(parsed[1])
            if not host or not 0 < port < 65536:
                raise ValueError("no host or port")
        except ConnectionError as e:  # "auto" and no cluster found on this machine
            raise self.error(f"{e}", "start one (`ray start --head`) or give its address (HOST:6379).") from None
        except (ValueError, TypeError):
            raise self.error("it is not HOST:PORT.", "give the head's address as `ray start --head` prints it, "
                                                     "e.g. 10.0.0.5:6379 (or 'auto' on the head itself).") from None
        shown = f"{host}:{port}" if ":" not in host else f"[{host}]:{port}"
        if shown not in address:
            self.note = f" (Ray dials {shown} for it)"
        return host, port, shown

    def resolve(self, host: str, port: int, clock: _Clock) -> list:
        _, box, done = _on_thread(lambda: socket.getaddrinfo(host, port, type=socket.SOCK_STREAM), "fillscope-dns")
        if not _wait(done, clock):
            raise self.late(f"the host name '{host}' did not resolve")
        if "error" in box:
            e = box["error"]
            raise self.error(f"the host name '{host}' does not resolve ({getattr(e, 'strerror', None) or e}).")
        return box["value"]

    def reach(self, infos: list, shown: str, clock: _Clock) -> None:
        """A TCP connection to the first address that accepts one, then the GCS asked for the cluster's id."""
        import select

        problem = None
        for family, kind, proto, _, sockaddr in infos:
            with socket.socket(family, kind, proto) as s:
                s.setblocking(False)
                err = s.connect_ex(sockaddr)
                while err in IN_PROGRESS:
                    step = clock.step()
                    if step <= 0:
                        raise self.late(f"{shown} did not accept a connection (a firewall dropping it, or no such "
                                        "machine)")
                    if select.select([], [s], [], step)[1]:
                        err = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                if err:
                    problem = (f"nothing accepts connections at {shown} (connection refused)." if
                               err == errno.ECONNREFUSED else f"{shown} cannot be reached ({os.strerror(err)}).")
                    continue
                break
        else:
            raise self.error(problem or f"'{self.address}' names no address to connect to.")
        self.ask_cluster_id(shown, clock)

    def ask_cluster_id(self, shown: str, clock: _Clock) -> None:
        """Ray's own GCS client built for the address (its first call asks for the cluster's id), on a thread waited
        for until the deadline: a GCS answers it; a port that never answers, or another service, does not. Given up
        on, it ends by itself (~40 s, measured) and leaves nothing behind, unlike ray.init."""
        from ray._raylet import GcsClient

        _, box, done = _on_thread(lambda: GcsClient(address=shown).cluster_id, "fillscope-gcs-probe")
        silent = f"{shown} accepts connections but did not answer as a Ray cluster (its GCS)"
        if not _wait(done, clock):
            raise self.late(silent)
        if "error" in box:
            said = " ".join(str(box["error"]).split())[:300]
            if "Timed out" in said:
                raise self.late(silent)
            raise self.error(f"{shown} answers, but not as a Ray cluster's GCS (Ray's client: {said}); another "
                             "service may listen there.")

    def init(self, kw: dict, clock: _Clock) -> None:
        """ray.init on a thread, waited for until the deadline; Ray shut down after a failure or when given up."""
        ray = self.ray

        def init():
            try:
                ray.init(address=self.address, **kw)
            except BaseException:
                _shutdown(ray)
                raise

        thread, box, done = _on_thread(init, "fillscope-ray-init")
        try:
            finished = _wait(done, clock)
        except BaseException:  # cancelled
            _give_up(ray, thread, done, self.address)
            raise
        if not finished:
            _give_up(ray, thread, done, self.address)
            raise self.late("Ray did not finish joining it")
        if "error" in box:
            e = box["error"]
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            cause = e.__cause__
            detail = f"{type(e).__name__}: {first}" + (f"; {type(cause).__name__}: {str(cause).strip()[:300]}"
                                                       if cause is not None and str(cause).strip() else "")
            raise self.error(f"Ray could not join it ({detail[:600]}).") from None


def _shutdown(ray) -> None:
    try:
        ray.shutdown()
    except Exception:  # noqa: BLE001  (nothing was initialised)
        pass


def _give_up(ray, thread, done: threading.Event, address: str) -> None:
    """A ray.init no longer waited for: shut down when it returns, and no other connect before that."""
    _given_up.append((thread, address))

    def reap():
        done.wait()
        _shutdown(ray)

    threading.Thread(target=reap, name="fillscope-ray-init-reaper", daemon=True).start()


def refuse_while_given_up() -> None:
    """FillScopeInputError('--ray') while a ray.init a connect gave up on still runs (Ray may come up under it)."""
    _given_up[:] = [(t, a) for t, a in _given_up if t.is_alive()]
    if _given_up:
        raise FillScopeInputError(
            "--ray", f"an earlier connect to '{_given_up[0][1]}' was given up on and Ray is still trying it "
                     "(ray.init cannot be stopped; it gives up by itself after about 12 minutes).",
            "wait until it has, or restart this process, then run the batch again.")


def join(ray, address: str, kw: dict, timeout_s: float = CONNECT_TIMEOUT_S, check_cancel=None) -> None:
    """ray.init(address=address, **kw) within `timeout_s` (module docstring), calling `check_cancel()` (which raises
    to cancel) every POLL_S while it waits; FillScopeInputError('--ray') naming the address and what to check."""
    timeout_s = check_timeout(timeout_s)
    refuse_while_given_up()
    clock = _Clock(timeout_s, check_cancel)
    joining = _Join(ray, address, timeout_s)
    host, port, shown = joining.target()
    infos = joining.resolve(host, port, clock)
    joining.reach(infos, shown, clock)
    joining.init(kw, clock)
